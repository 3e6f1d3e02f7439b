"""What every ``kvreg-admin`` command shares: the actor, the ``--json`` option, the global options, sessions.

Every change the admin CLI makes is done as :data:`ACTOR` (a server admin named
``kvreg-admin``), so the audit log says who did it. The global options (``--data``,
``--database-url``, ``--storage``, ``--json``) become a :class:`Settings` in the Typer
context; :func:`write_session`, :func:`read_session` and :func:`opened_registry` open
the registry those settings name and close it again. Defines no command.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from sqlalchemy.orm import Session

from kvreg import console as output
from kvreg_registry.auth import Principal
from kvreg_registry.settings import Settings
from kvreg_registry.state import RegistryState, open_state

ACTOR = Principal(user_id=None, name="kvreg-admin", is_admin=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]


def global_options(
    ctx: typer.Context,
    data: Annotated[
        Path | None,
        typer.Option("--data", metavar="DIR", help="Data folder (default: $KVREG_DATA or ./kvreg-data)."),
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option("--database-url", help="SQLAlchemy URL (default: SQLite in the data folder)."),
    ] = None,
    storage: Annotated[
        str | None, typer.Option("--storage", help="Object storage: a folder or s3://bucket/prefix.")
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """The options before the command: where the registry is, and ``--json``."""
    state = ctx.ensure_object(output.CliState)
    state.json = state.json or json_output
    overrides: dict[str, Any] = {}
    if data is not None:
        overrides["data_dir"] = data
    if database_url is not None:
        overrides["database_url"] = database_url
    if storage is not None:
        overrides["storage_url"] = storage
    ctx.meta["settings"] = Settings.from_env(**overrides)


def settings_of(ctx: typer.Context) -> Settings:
    """The settings :func:`global_options` put in the context."""
    settings: Settings = ctx.meta["settings"]
    return settings


@contextmanager
def opened_registry(ctx: typer.Context) -> Iterator[RegistryState]:
    """The registry (database, storage, audit log) of the context's settings, migrated if needed."""
    st = open_state(settings_of(ctx))
    try:
        yield st
    finally:
        st.db.dispose()


@contextmanager
def write_session(ctx: typer.Context) -> Iterator[Session]:
    """A write transaction on the registry's database (committed when the block ends without error)."""
    with opened_registry(ctx) as st, st.db.write() as s:
        yield s


@contextmanager
def read_session(ctx: typer.Context) -> Iterator[Session]:
    """A read-only session on the registry's database."""
    with opened_registry(ctx) as st, st.db.read() as s:
        yield s

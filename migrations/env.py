"""alembic environment of the registry database.

The URL comes from the alembic config (``sqlalchemy.url``, set by
``kvreg_registry.db.engine.alembic_config`` or ``-x url=...`` on the command
line, else ``$KVREG_DATABASE_URL``). SQLite gets batch mode, so that revisions
that alter tables work there too. ``target_metadata`` is the models' metadata, for
``alembic revision --autogenerate`` and for the drift test.
"""

from __future__ import annotations

import os

from alembic import context

from kvreg_registry.db.engine import make_engine
from kvreg_registry.db.models import Base, include_in_autogenerate

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    url = url or os.environ.get("KVREG_DATABASE_URL")
    if not url:
        raise SystemExit("no database URL: pass -x url=..., or set KVREG_DATABASE_URL")
    return url


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = make_engine(_url())
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                render_as_batch=connection.dialect.name == "sqlite",
                compare_type=True,
                include_name=include_in_autogenerate,
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()

"""``kvreg flywheel`` in a store: run the loop there, pushing the library to a remote when asked.

With a remote, the library is pushed over the remote's verified contact
(``kvreg.remote.auditlog.contact``: its audit-log checkpoint is checked, and
saved when the run succeeds) and the second exam routes over the same
registry. The model is loaded by the caller. Nothing here renders or prints.
"""

from __future__ import annotations

from kvreg.app.discovery import RemoteSource
from kvreg.app.flywheel.loop import FlywheelReport, FlywheelSpec, Progress, Registry, run_flywheel
from kvreg.app.flywheel.served import ServedExam
from kvreg.core.keys import SigningKey
from kvreg.engine.runtime import LoadedModel
from kvreg.remote.auditlog import contact
from kvreg.store.home import Home


def run_in_store(
    lm: LoadedModel,
    home: Home,
    key: SigningKey,
    spec: FlywheelSpec,
    *,
    push_to: str | None = None,
    progress: Progress | None = None,
    server: ServedExam | None = None,
) -> FlywheelReport:
    """The flywheel in ``home``, signed with ``key``; with ``push_to`` (a remote's name) the
    library is pushed there and the second exam reads from it; with ``server`` the exams go
    through that ``kvreg engine serve``."""
    if push_to is None:
        return run_flywheel(lm, home, key, spec, progress=progress, server=server)
    with contact(home, push_to) as (client, audit):
        registry = Registry(push_client=client, reader=RemoteSource(client=client, audit=audit), home=home)
        return run_flywheel(lm, home, key, spec, registry=registry, progress=progress, server=server)

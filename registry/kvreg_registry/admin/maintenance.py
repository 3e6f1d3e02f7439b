"""The top-level ``kvreg-admin`` commands that keep a registry healthy: ``migrate``, ``gc`` and ``fsck``.

They are plain functions; ``kvreg_registry.admin`` registers them on the app. The work
is done by alembic, ``services.gc`` and ``services.fsck``; this module only turns
options into calls and reports into output.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from kvreg import console as output
from kvreg.core.errors import IntegrityError
from kvreg_registry.admin.common import ACTOR, JsonOpt, opened_registry, settings_of
from kvreg_registry.services.fsck import check_registry
from kvreg_registry.services.gc import collect_garbage
from kvreg_registry.state import open_state


def migrate(ctx: typer.Context, json_output: JsonOpt = False) -> None:
    """Create the database schema or bring it to the newest revision (alembic upgrade head)."""
    out = output.get(ctx, json_output)
    settings = settings_of(ctx)
    # Always migrate here, whatever KVREG_MIGRATE_ON_START says: that is what this command is for.
    open_state(replace(settings, migrate_on_start=True)).db.dispose()
    out.result(
        {"database": settings.effective_database_url.split("@")[-1], "revision": "head"},
        lambda c: c.print("[green]database is at the newest revision[/green]"),
    )


def gc(
    ctx: typer.Context,
    grace_seconds: Annotated[
        int | None,
        typer.Option(
            "--grace-seconds", min=0, help="Keep anything younger (default: KVREG_GC_GRACE_SECONDS, 3600)."
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what would go; delete nothing.")] = False,
    json_output: JsonOpt = False,
) -> None:
    """Apply retention policies, then delete objects no envelope references, older than the grace
    period, outside uploads in flight; legal holds keep what they reach."""
    out = output.get(ctx, json_output)
    with opened_registry(ctx) as st:
        grace = st.settings.gc_grace_seconds if grace_seconds is None else grace_seconds
        report = collect_garbage(st.db, st.storage, ACTOR, grace_seconds=grace, dry_run=dry_run)
    data = report.to_dict()
    out.result(
        data,
        lambda c: c.print(
            f"{'would remove' if dry_run else 'removed'} {report.objects_removed} object(s), "
            f"{report.bytes_removed} bytes; "
            f"{report.links_removed} unreferenced object link(s); {report.orphans_removed} orphan(s); "
            f"retention: {report.retention_deleted} envelope(s) {'would go' if dry_run else 'deleted'}, "
            f"{report.retention_held} kept by legal holds"
        ),
    )


def fsck(
    ctx: typer.Context,
    no_hash: Annotated[
        bool, typer.Option("--no-hash", help="Compare sizes only; do not re-hash the stored objects.")
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Check that the database, the object storage and the audit log agree (read-only; exit 3 on
    problems): objects hash to their names, every hold, envelope and ref has what it names, the
    log is gap-free and its signed checkpoints match its entries."""
    out = output.get(ctx, json_output)
    with opened_registry(ctx) as st:
        report = check_registry(st.db, st.storage, st.log, rehash=not no_hash)
    error = None
    if not report.ok:
        error = IntegrityError(
            f"fsck found {len(report.problems)} problem(s) in the registry",
            hint="see docs/administration.md (consistency check)",
        )

    def render(c: Any) -> None:
        c.print(
            f"checked {report.objects_checked} object(s) ({report.bytes_hashed} bytes hashed), "
            f"{report.envelopes_checked} envelope(s), {report.refs_checked} ref(s), "
            f"audit log of {report.log_size} entries (latest checkpoint: {report.checkpoint_size})"
        )
        if report.leftovers:
            c.print(
                f"{len(report.leftovers)} leftover(s) of interrupted operations (the next GC removes them)"
            )
        if report.ok:
            c.print("[green]no problems[/green]")
            return
        table = Table(title=f"{len(report.problems)} problem(s)")
        table.add_column("kind")
        table.add_column("subject")
        table.add_column("message")
        for p in report.problems:
            table.add_row(p.kind, escape(p.subject), escape(p.message))
        c.print(table)

    out.result(report.to_dict(), render, error=error)

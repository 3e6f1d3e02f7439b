"""``kvreg fsck`` and ``kvreg gc``: check and clean the local store.

``fsck`` re-hashes every object, moves damaged ones to ``quarantine/`` (unless
``--no-quarantine``) and checks refs, envelopes and manifests; it exits 3 when it
finds a problem. ``gc`` deletes what no ref reaches and is older than the grace
period; with ``--evict`` it then evicts least recently used unpinned objects until
the store fits ``store.max-bytes``. Objects evicted that way are listed by ``fsck``
as evicted, not as problems. The commands parse their arguments and render the
reports of the use cases in ``kvreg.app.maintenance``.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvreg import console as output
from kvreg.app.maintenance import DEFAULT_GRACE_SECONDS, check_store, collect_garbage
from kvreg.cli import common
from kvreg.cli.paging import render_evict
from kvreg.console import JsonOpt
from kvreg.core.errors import UsageError


def fsck_cmd(
    ctx: typer.Context,
    no_quarantine: Annotated[
        bool, typer.Option("--no-quarantine", help="Only report damaged objects; do not move them.")
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Check the store: re-hash every object, check refs, envelopes and manifests (exit 3 on problems)."""
    out = output.get(ctx, json_output)
    home = common.home(ctx)
    with out.status(f"checking {home.root}"):
        checked = check_store(home, quarantine=not no_quarantine)
    report = checked.fsck

    def render(console: Console) -> None:
        console.print(
            f"checked {report.objects_checked} objects ({report.bytes_hashed} bytes hashed) "
            f"in {escape(str(home.root))}"
        )
        if report.evicted:
            console.print(
                f"{len(report.evicted)} object(s) evicted under the store's size budget "
                "(not damage; pull the artifacts again to restore them)"
            )
        if report.not_fetched:
            console.print(
                f"{len(report.not_fetched)} object(s) not fetched (lazy pull; not damage: "
                "kvreg pull without --lazy fetches them)"
            )
        if report.ok:
            console.print("[green]no problems[/green]")
            return
        table = Table(title=f"{len(report.problems)} problem(s)")
        table.add_column("kind")
        table.add_column("subject")
        table.add_column("message")
        for p in report.problems:
            table.add_row(str(p.kind), escape(p.subject), escape(p.message))
        console.print(table)

    out.result(checked.to_dict(), render, error=checked.error)


def gc_cmd(
    ctx: typer.Context,
    grace: Annotated[
        float,
        typer.Option("--grace", metavar="SECONDS", help="Keep unreferenced files younger than this."),
    ] = DEFAULT_GRACE_SECONDS,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would be removed.")] = False,
    evict: Annotated[
        bool,
        typer.Option(
            "--evict", help="Then evict least recently used unpinned objects down to store.max-bytes."
        ),
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Remove objects and envelopes that no ref reaches (older than the grace period)."""
    out = output.get(ctx, json_output)
    if grace < 0:
        raise UsageError(f"--grace must not be negative, got {grace}")
    home = common.home(ctx)
    collected = collect_garbage(home, grace_seconds=grace, dry_run=dry_run, evict=evict)
    report, evicted = collected.gc, collected.eviction
    verb = "would remove" if dry_run else "removed"

    def render(console: Console) -> None:
        console.print(
            f"{verb} {len(report.removed_objects)} objects, {len(report.removed_envelopes)} envelopes, "
            f"{len(report.removed_temp)} temp files: {report.bytes_freed} bytes "
            f"({report.kept_reachable} reachable kept, {report.kept_fresh} kept within the grace period)"
        )
        if evicted is not None:
            render_evict(evicted, console)

    out.result(collected.to_dict(), render)


def register(app: typer.Typer) -> None:
    app.command("fsck")(fsck_cmd)
    app.command("gc")(gc_cmd)

"""``kvreg pin | unpin | pins | evict``: keep the local store under its size budget.

``store.max-bytes`` (``kvreg config set store.max-bytes 20GiB``) is the budget;
``kvreg evict`` (or ``kvreg gc --evict``) deletes the least recently used objects
until the store fits, never those of a pinned ref or of a graft in progress.
An evicted artifact keeps its ref; ``kvreg pull`` brings its objects back. The
commands parse their arguments and render the reports of the use cases in
``kvreg.app.paging``.
"""

from __future__ import annotations

from typing import Annotated, Any, Protocol

import typer
from rich.console import Console
from rich.markup import escape

from kvreg import console as output
from kvreg.app import paging
from kvreg.cli import common
from kvreg.console import JsonOpt
from kvreg.core.sizes import format_size

TargetArg = Annotated[str, typer.Argument(metavar="REF", help="A ref (namespace/name) or a manifest digest.")]


def pin_cmd(ctx: typer.Context, target: TargetArg, json_output: JsonOpt = False) -> None:
    """Never evict what REF reaches (the pin follows the ref when it moves)."""
    out = output.get(ctx, json_output)
    report = paging.pin(common.home(ctx), target)
    out.result(
        report.to_dict(),
        lambda c: c.print(
            f"pinned {escape(target)}" if report.new else f"{escape(target)} was pinned already"
        ),
    )


def unpin_cmd(ctx: typer.Context, target: TargetArg, json_output: JsonOpt = False) -> None:
    """Let eviction remove REF's objects again when the store is over budget."""
    out = output.get(ctx, json_output)
    report = paging.unpin(common.home(ctx), target)
    out.result(
        report.to_dict(),
        lambda c: c.print(
            f"unpinned {escape(target)}" if report.was_pinned else f"{escape(target)} was not pinned"
        ),
    )


def pins_cmd(ctx: typer.Context, json_output: JsonOpt = False) -> None:
    """List the pinned refs and digests."""
    out = output.get(ctx, json_output)
    report = paging.list_pins(common.home(ctx))
    items = report.pins

    def render(console: Console) -> None:
        if not items:
            console.print("nothing pinned")
        for p in items:
            console.print(escape(p))

    out.result(report.to_dict(), render)


class EvictReport(Protocol):
    """What :func:`render_evict` reads of an eviction's report (``kvreg.app.paging.evict``)."""

    @property
    def dry_run(self) -> bool: ...
    @property
    def max_bytes(self) -> int | None: ...
    @property
    def bytes_after(self) -> int: ...
    @property
    def bytes_freed(self) -> int: ...
    @property
    def evicted(self) -> list[dict[str, Any]]: ...
    @property
    def over_budget(self) -> bool: ...
    @property
    def protected_pinned(self) -> int: ...
    @property
    def protected_leased(self) -> int: ...
    @property
    def protected_other(self) -> int: ...


def render_evict(report: EvictReport, console: Console) -> None:
    verb = "would evict" if report.dry_run else "evicted"
    if report.max_bytes is None:
        console.print("no budget set (kvreg config set store.max-bytes SIZE); nothing evicted")
        return
    console.print(
        f"{verb} {len(report.evicted)} objects ({format_size(report.bytes_freed)}); the store holds "
        f"{format_size(report.bytes_after)} of a {format_size(report.max_bytes)} budget"
    )
    for e in report.evicted:
        console.print(f"  {e['digest']}  {format_size(e['bytes'])}  last used {e['last_used']}")
    if report.over_budget:
        console.print(
            f"[yellow]still over budget:[/yellow] the rest is pinned ({report.protected_pinned}), "
            f"in use by a graft ({report.protected_leased}) or not evictable ({report.protected_other}: "
            "manifests, deposits in progress; unreferenced objects are removed by kvreg gc)"
        )


def run_evict(ctx: typer.Context, max_bytes: str | None, dry_run: bool, json_output: bool) -> None:
    out = output.get(ctx, json_output)
    report = paging.evict(common.home(ctx), max_bytes=max_bytes, dry_run=dry_run)
    out.result(report.to_dict(), lambda c: render_evict(report, c))


MaxBytesOpt = Annotated[
    str | None,
    typer.Option("--max-bytes", metavar="SIZE", help="Budget for this run (default: store.max-bytes)."),
]


def evict_cmd(
    ctx: typer.Context,
    max_bytes: MaxBytesOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would be evicted.")] = False,
    json_output: JsonOpt = False,
) -> None:
    """Evict least recently used unpinned objects until the store fits its budget."""
    run_evict(ctx, max_bytes, dry_run, json_output)


def register(app: typer.Typer) -> None:
    app.command("pin")(pin_cmd)
    app.command("unpin")(unpin_cmd)
    app.command("pins")(pins_cmd)
    app.command("evict")(evict_cmd)

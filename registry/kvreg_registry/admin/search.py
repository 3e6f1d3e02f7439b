"""``kvreg-admin search``: rebuild the full-text search index (``services.search`` does the work)."""

from __future__ import annotations

from typing import Annotated

import typer

from kvreg import console as output
from kvreg_registry.admin.common import JsonOpt, opened_registry
from kvreg_registry.services import search_index

app = typer.Typer(help="The full-text search index of artifacts.", no_args_is_help=True)


@app.command("reindex")
def search_reindex(
    ctx: typer.Context,
    batch: Annotated[
        int, typer.Option("--batch", min=1, max=10_000, help="Envelopes per transaction.")
    ] = 200,
    json_output: JsonOpt = False,
) -> None:
    """Recompute every envelope's search text (annotations, prompt and solution text, read from
    storage) and rebuild the full-text index; rows already right are left alone."""
    out = output.get(ctx, json_output)
    with opened_registry(ctx) as st:
        report = search_index.reindex(st.db, st.storage, batch=batch)
    line = f"reindexed {report.envelopes} envelope(s): {report.changed} changed"
    if report.missing_text:
        line += f", {report.missing_text} with a text object missing from storage"
    if report.index_rebuilt:
        line += ", full-text index rebuilt"
    out.result(report.to_dict(), lambda c: c.print(line))

"""``kvreg-admin retention``: set, clear and show a namespace's retention policy (GC applies it)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape

from kvreg import console as output
from kvreg_registry.admin.common import ACTOR, JsonOpt, read_session, write_session
from kvreg_registry.db.models import RetentionPolicy
from kvreg_registry.services import accounts, retention

app = typer.Typer(
    help="Retention policies: which envelopes no ref points at GC may delete.", no_args_is_help=True
)


def _policy_row(namespace: str, p: RetentionPolicy | None) -> dict[str, Any]:
    return {
        "namespace": namespace,
        "keep_versions": None if p is None else p.keep_versions,
        "keep_days": None if p is None else p.keep_days,
    }


def _policy_text(d: dict[str, Any]) -> str:
    rules = []
    if d["keep_versions"] is not None:
        rules.append(f"the {d['keep_versions']} newest envelopes")
    if d["keep_days"] is not None:
        rules.append(f"envelopes younger than {d['keep_days']} days")
    if not rules:
        return f"{d['namespace']}: no retention policy (everything is kept)"
    kept = " and ".join(rules)
    return f"{d['namespace']}: keeps {kept}, and every envelope a ref points at or a legal hold protects"


@app.command("set")
def retention_set(
    ctx: typer.Context,
    namespace: str,
    keep_versions: Annotated[
        int | None, typer.Option("--keep-versions", min=1, help="Keep the N newest envelopes.")
    ] = None,
    keep_days: Annotated[
        int | None, typer.Option("--keep-days", min=1, help="Keep envelopes younger than D days.")
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """Set NAMESPACE's retention policy: GC deletes envelopes that no rule keeps, no ref points at
    and no legal hold protects (an envelope is kept if any rule keeps it)."""
    out = output.get(ctx, json_output)
    with write_session(ctx) as s:
        policy, _seq = retention.set_policy(
            s, ACTOR, accounts.get_namespace(s, namespace), keep_versions=keep_versions, keep_days=keep_days
        )
        data = _policy_row(namespace, policy)
    out.result(data, lambda c: c.print(escape(_policy_text(data))))


@app.command("clear")
def retention_clear(ctx: typer.Context, namespace: str, json_output: JsonOpt = False) -> None:
    """Remove NAMESPACE's retention policy: keep everything."""
    out = output.get(ctx, json_output)
    with write_session(ctx) as s:
        retention.clear_policy(s, ACTOR, accounts.get_namespace(s, namespace))
    data = _policy_row(namespace, None)
    out.result(data, lambda c: c.print(escape(_policy_text(data))))


@app.command("show")
def retention_show(ctx: typer.Context, namespace: str, json_output: JsonOpt = False) -> None:
    """Show NAMESPACE's retention policy."""
    out = output.get(ctx, json_output)
    with read_session(ctx) as s:
        data = _policy_row(namespace, retention.get_policy(s, accounts.get_namespace(s, namespace)))
    out.result(data, lambda c: c.print(escape(_policy_text(data))))

"""``kvreg-admin hold``: place, lift and list legal holds (``services.holds`` enforces them)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from kvreg import console as output
from kvreg.core.timestamps import rfc3339
from kvreg_registry.admin.common import ACTOR, JsonOpt, read_session, write_session
from kvreg_registry.db.models import LegalHold, Namespace
from kvreg_registry.services import accounts, holds

app = typer.Typer(
    help="Legal holds: nothing a hold reaches can be deleted (API, retention, GC) until it is lifted.",
    no_args_is_help=True,
)


def _hold_row(h: LegalHold, namespace: str) -> dict[str, Any]:
    """The hold as the audit log describes it (``holds.hold_doc``), with its state and history."""
    return {
        **holds.hold_doc(h, namespace),
        "active": h.lifted_at is None,
        "created_by": h.created_by,
        "created_at": rfc3339(h.created_at),
        "log_index": h.log_seq,
        "lifted_at": None if h.lifted_at is None else rfc3339(h.lifted_at),
        "lifted_by": h.lifted_by,
        "lift_reason": h.lift_reason,
        "lifted_log_index": h.lifted_log_seq,
    }


@app.command("set")
def hold_set(
    ctx: typer.Context,
    namespace: str,
    ref: Annotated[
        str | None, typer.Argument(metavar="[REF]", help="A ref NAME of the namespace; none: all of it.")
    ] = None,
    reason: Annotated[str, typer.Option("--reason", help="Why (the matter, a ticket); logged.")] = "",
    json_output: JsonOpt = False,
) -> None:
    """Place a legal hold on NAMESPACE, or on its ref REF (which then can be neither moved nor deleted)."""
    out = output.get(ctx, json_output)
    with write_session(ctx) as s:
        hold = holds.place(s, ACTOR, accounts.get_namespace(s, namespace), ref=ref, reason=reason)
        data = _hold_row(hold, namespace)
    what = f"{namespace}/{ref}" if ref else f"namespace {namespace}"
    out.result(data, lambda c: c.print(f"[green]hold {data['id']}[/green] on {escape(what)}"))


@app.command("lift")
def hold_lift(
    ctx: typer.Context,
    hold_id: Annotated[int, typer.Argument(metavar="ID", help="The hold's id (hold list).")],
    reason: Annotated[str, typer.Option("--reason", help="Why it is lifted; logged.")] = "",
    json_output: JsonOpt = False,
) -> None:
    """Lift legal hold ID (logged as hold.lifted; lifting a lifted hold changes nothing)."""
    out = output.get(ctx, json_output)
    with write_session(ctx) as s:
        found = holds.get(s, None, hold_id)
        # The hold's namespace_id is a foreign key: the row is there.
        ns = s.get_one(Namespace, found.namespace_id)
        hold, seq = holds.lift(s, ACTOR, ns, hold_id, reason=reason)
        data = {**_hold_row(hold, ns.name), "changed": seq is not None}
    out.result(
        data,
        lambda c: c.print(
            f"lifted hold {hold_id}" if data["changed"] else f"hold {hold_id} was lifted already"
        ),
    )


@app.command("list")
def hold_list(
    ctx: typer.Context,
    namespace: Annotated[str | None, typer.Argument(help="Only this namespace's holds.")] = None,
    active: Annotated[bool, typer.Option("--active", help="Only holds not lifted.")] = False,
    json_output: JsonOpt = False,
) -> None:
    """List legal holds (lifted ones too, unless --active)."""
    out = output.get(ctx, json_output)
    with read_session(ctx) as s:
        spaces = (
            [accounts.get_namespace(s, namespace)]
            if namespace is not None
            else accounts.list_namespaces(s, ACTOR)
        )
        rows = [_hold_row(h, ns.name) for ns in spaces for h in holds.list_holds(s, ns, active_only=active)]

    def render(c: Any) -> None:
        table = Table("id", "namespace", "ref", "state", "placed", "reason")
        for r in rows:
            state = "active" if r["active"] else f"lifted {r['lifted_at']} by {r['lifted_by']}"
            table.add_row(
                str(r["id"]),
                escape(r["namespace"]),
                escape(r["ref"] or "(all)"),
                escape(state),
                f"{r['created_at']} by {escape(str(r['created_by']))}",
                escape(r["reason"]),
            )
        c.print(table)

    out.result({"holds": rows}, render)

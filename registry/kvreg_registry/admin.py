"""``kvreg-admin``: administer a registry's database directly (no server needed).

This is how the first admin token is made, and how operators script namespaces,
users, tokens, roles, signing keys and garbage collection. It reads the same
settings as ``kvreg serve`` (``--data``, ``--database-url``, ``--storage`` or the
``KVREG_*`` variables), runs the migrations if needed, and calls the same
``kvreg_registry.services`` functions as the HTTP API, so every change is checked
and audit-logged the same way (actor ``kvreg-admin``). Tokens are printed once.

It uses the ``kvreg`` CLI's output module so that ``--json``, messages and exit
codes behave exactly as in ``kvreg``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from kvreg import console as output
from kvreg.core.timestamps import rfc3339
from kvreg.fileio.keyfiles import read_public_key
from kvreg_registry.app import open_state
from kvreg_registry.auth import Principal
from kvreg_registry.db.models import User
from kvreg_registry.services import accounts
from kvreg_registry.services.gc import collect_garbage
from kvreg_registry.settings import Settings

ACTOR = Principal(user_id=None, name="kvreg-admin", is_admin=True)

app = typer.Typer(
    name="kvreg-admin",
    help="Administer a kvreg registry's database: namespaces, users, tokens, roles, keys, legal holds, "
    "retention, GC, the search index.\n\n"
    "Example (first setup):\n\n"
    "  kvreg-admin --data ./kvreg-data user create alice --admin\n\n"
    "  kvreg-admin --data ./kvreg-data token create alice --label laptop\n\n"
    "  kvreg-admin --data ./kvreg-data namespace create aime25\n\n"
    "  kvreg-admin --data ./kvreg-data key add aime25 ed25519:...",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
namespace_app = typer.Typer(help="Create, list and change namespaces.", no_args_is_help=True)
user_app = typer.Typer(help="Create and list users.", no_args_is_help=True)
token_app = typer.Typer(help="Create and revoke API tokens.", no_args_is_help=True)
role_app = typer.Typer(help="Give and take roles (read, write, admin) in a namespace.", no_args_is_help=True)
key_app = typer.Typer(help="Register and revoke the signing keys a namespace accepts.", no_args_is_help=True)
hold_app = typer.Typer(
    help="Legal holds: nothing a hold reaches can be deleted (API, retention, GC) until it is lifted.",
    no_args_is_help=True,
)
retention_app = typer.Typer(
    help="Retention policies: which envelopes no ref points at GC may delete.", no_args_is_help=True
)
search_app = typer.Typer(help="The full-text search index of artifacts.", no_args_is_help=True)
app.add_typer(namespace_app, name="namespace")
app.add_typer(user_app, name="user")
app.add_typer(token_app, name="token")
app.add_typer(role_app, name="role")
app.add_typer(key_app, name="key")
app.add_typer(hold_app, name="hold")
app.add_typer(retention_app, name="retention")
app.add_typer(search_app, name="search")

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]


@app.callback()
def _options(
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


@contextmanager
def _write(ctx: typer.Context) -> Iterator[Any]:
    st = open_state(ctx.meta["settings"])
    try:
        with st.db.write() as s:
            yield s
    finally:
        st.db.dispose()


@contextmanager
def _read(ctx: typer.Context) -> Iterator[Any]:
    st = open_state(ctx.meta["settings"])
    try:
        with st.db.read() as s:
            yield s
    finally:
        st.db.dispose()


@app.command()
def migrate(ctx: typer.Context, json_output: JsonOpt = False) -> None:
    """Create the database schema or bring it to the newest revision (alembic upgrade head)."""
    out = output.get(ctx, json_output)
    settings: Settings = ctx.meta["settings"]
    # Always migrate here, whatever KVREG_MIGRATE_ON_START says: that is what this command is for.
    open_state(replace(settings, migrate_on_start=True)).db.dispose()
    out.result(
        {"database": settings.effective_database_url.split("@")[-1], "revision": "head"},
        lambda c: c.print("[green]database is at the newest revision[/green]"),
    )


# --- namespaces --------------------------------------------------------------------------


@namespace_app.command("create")
def namespace_create(
    ctx: typer.Context,
    name: str,
    public: Annotated[bool, typer.Option("--public", help="Anyone may read it without a token.")] = False,
    description: Annotated[str, typer.Option("--description", help="One line about it.")] = "",
    json_output: JsonOpt = False,
) -> None:
    """Create namespace NAME (private unless --public)."""
    out = output.get(ctx, json_output)
    with _write(ctx) as s:
        ns = accounts.create_namespace(s, ACTOR, name, public=public, description=description)
        data = {"namespace": ns.name, "public": ns.public}
    out.result(
        data,
        lambda c: c.print(
            f"[green]created[/green] namespace {escape(name)} ({'public' if public else 'private'})"
        ),
    )


@namespace_app.command("list")
def namespace_list(ctx: typer.Context, json_output: JsonOpt = False) -> None:
    """List every namespace."""
    out = output.get(ctx, json_output)
    with _read(ctx) as s:
        rows = [
            {"namespace": ns.name, "public": ns.public, "description": ns.description}
            for ns in accounts.list_namespaces(s, ACTOR)
        ]

    def render(c: Any) -> None:
        table = Table("namespace", "visibility", "description")
        for r in rows:
            table.add_row(
                escape(r["namespace"]), "public" if r["public"] else "private", escape(r["description"])
            )
        c.print(table)

    out.result({"namespaces": rows}, render)


@namespace_app.command("visibility")
def namespace_visibility(
    ctx: typer.Context,
    name: str,
    visibility: Annotated[str, typer.Argument(metavar="public|private")],
    json_output: JsonOpt = False,
) -> None:
    """Make namespace NAME public (readable without a token) or private."""
    out = output.get(ctx, json_output)
    if visibility not in {"public", "private"}:
        raise typer.BadParameter("must be 'public' or 'private'")
    with _write(ctx) as s:
        accounts.set_namespace_public(s, ACTOR, name, visibility == "public")
    out.result(
        {"namespace": name, "public": visibility == "public"},
        lambda c: c.print(f"{escape(name)} is now {visibility}"),
    )


# --- users and tokens ----------------------------------------------------------------------


@user_app.command("create")
def user_create(
    ctx: typer.Context,
    name: str,
    admin: Annotated[
        bool, typer.Option("--admin", help="A server admin: every role in every namespace.")
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Create user NAME."""
    out = output.get(ctx, json_output)
    with _write(ctx) as s:
        accounts.create_user(s, ACTOR, name, admin=admin)
    out.result(
        {"user": name, "admin": admin}, lambda c: c.print(f"[green]created[/green] user {escape(name)}")
    )


@user_app.command("list")
def user_list(ctx: typer.Context, json_output: JsonOpt = False) -> None:
    """List users and their roles."""
    from sqlalchemy import select

    out = output.get(ctx, json_output)
    with _read(ctx) as s:
        rows = []
        for u in s.scalars(select(User).order_by(User.name)).all():
            roles = accounts.roles_of(s, Principal(user_id=u.id, name=u.name))
            rows.append({"user": u.name, "admin": u.is_admin, "roles": roles})

    def render(c: Any) -> None:
        table = Table("user", "admin", "roles")
        for r in rows:
            table.add_row(
                escape(r["user"]),
                "yes" if r["admin"] else "",
                escape(", ".join(f"{k}:{v}" for k, v in r["roles"].items())),
            )
        c.print(table)

    out.result({"users": rows}, render)


@token_app.command("create")
def token_create(
    ctx: typer.Context,
    user: str,
    label: Annotated[str, typer.Option("--label", help="What the token is for (shown in listings).")] = "",
    expires_in_days: Annotated[
        int | None, typer.Option("--expires-in-days", min=1, help="Expiry; none by default.")
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """Create an API token for USER and print it once (only its hash is stored)."""
    out = output.get(ctx, json_output)
    with _write(ctx) as s:
        t = accounts.create_token(s, ACTOR, user, label=label, expires_in_days=expires_in_days)
    data = {
        "id": t.id,
        "user": t.user,
        "token": t.token,
        "label": t.label,
        "expires_at": t.expires_at.isoformat() if t.expires_at else None,
    }
    out.result(data, lambda c: c.print(f"token {t.id} for {escape(t.user)} (shown once):\n{t.token}"))


@token_app.command("revoke")
def token_revoke(ctx: typer.Context, token_id: int, json_output: JsonOpt = False) -> None:
    """Revoke token TOKEN_ID (its id, as `token create` printed)."""
    out = output.get(ctx, json_output)
    with _write(ctx) as s:
        accounts.revoke_token(s, ACTOR, token_id)
    out.result({"id": token_id, "revoked": True}, lambda c: c.print(f"revoked token {token_id}"))


# --- roles and keys ---------------------------------------------------------------------------


@role_app.command("set")
def role_set(
    ctx: typer.Context,
    namespace: str,
    user: str,
    role: Annotated[str, typer.Argument(metavar="read|write|admin")],
    json_output: JsonOpt = False,
) -> None:
    """Give USER the ROLE in NAMESPACE."""
    out = output.get(ctx, json_output)
    with _write(ctx) as s:
        accounts.set_role(s, ACTOR, namespace, user, role)
    out.result(
        {"namespace": namespace, "user": user, "role": role},
        lambda c: c.print(f"{escape(user)} has {role} in {escape(namespace)}"),
    )


@role_app.command("remove")
def role_remove(ctx: typer.Context, namespace: str, user: str, json_output: JsonOpt = False) -> None:
    """Take USER's role in NAMESPACE away."""
    out = output.get(ctx, json_output)
    with _write(ctx) as s:
        accounts.remove_role(s, ACTOR, namespace, user)
    out.result(
        {"namespace": namespace, "user": user, "role": None},
        lambda c: c.print(f"{escape(user)} has no role in {escape(namespace)}"),
    )


@key_app.command("add")
def key_add(
    ctx: typer.Context,
    namespace: str,
    pubkey: Annotated[
        str,
        typer.Argument(metavar="PUBKEY", help="'ed25519:<base64>' (kvreg keys export) or a .pub/PEM file."),
    ],
    json_output: JsonOpt = False,
) -> None:
    """Accept envelopes signed by PUBKEY in NAMESPACE."""
    out = output.get(ctx, json_output)
    public = read_public_key(pubkey)
    with _write(ctx) as s:
        accounts.register_key(s, ACTOR, namespace, public.to_text())
    out.result(
        {"namespace": namespace, "keyid": public.keyid, "public_key": public.to_text()},
        lambda c: c.print(f"[green]registered[/green] {public.keyid} for {escape(namespace)}"),
    )


@key_app.command("list")
def key_list(ctx: typer.Context, namespace: str, json_output: JsonOpt = False) -> None:
    """List the signing keys of NAMESPACE (revoked ones too)."""
    out = output.get(ctx, json_output)
    with _read(ctx) as s:
        ns = accounts.get_namespace(s, namespace)
        rows = [
            {"keyid": k.keyid, "public_key": k.public_key, "revoked": k.revoked_at is not None}
            for k in accounts.list_keys(s, ns)
        ]

    def render(c: Any) -> None:
        table = Table("keyid", "public key", "state")
        for r in rows:
            table.add_row(r["keyid"], r["public_key"], "revoked" if r["revoked"] else "active")
        c.print(table)

    out.result({"namespace": namespace, "keys": rows}, render)


@key_app.command("revoke")
def key_revoke(ctx: typer.Context, namespace: str, keyid: str, json_output: JsonOpt = False) -> None:
    """Stop accepting new envelopes signed by KEYID in NAMESPACE (stored ones stay)."""
    out = output.get(ctx, json_output)
    with _write(ctx) as s:
        accounts.revoke_key(s, ACTOR, namespace, keyid)
    out.result(
        {"namespace": namespace, "keyid": keyid, "revoked": True}, lambda c: c.print(f"revoked {keyid}")
    )


# --- legal holds and retention -------------------------------------------------------------------


def _hold_row(h: Any, namespace: str) -> dict[str, Any]:
    def t(v: Any) -> str | None:
        return None if v is None else rfc3339(v)

    return {
        "id": h.id,
        "namespace": namespace,
        "ref": h.ref_name,
        "digest": h.manifest_digest,
        "reason": h.reason,
        "active": h.lifted_at is None,
        "created_by": h.created_by,
        "created_at": t(h.created_at),
        "log_index": h.log_seq,
        "lifted_at": t(h.lifted_at),
        "lifted_by": h.lifted_by,
        "lift_reason": h.lift_reason,
        "lifted_log_index": h.lifted_log_seq,
    }


@hold_app.command("set")
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
    from kvreg_registry.services import holds

    out = output.get(ctx, json_output)
    with _write(ctx) as s:
        hold = holds.place(s, ACTOR, accounts.get_namespace(s, namespace), ref=ref, reason=reason)
        data = _hold_row(hold, namespace)
    what = f"{namespace}/{ref}" if ref else f"namespace {namespace}"
    out.result(data, lambda c: c.print(f"[green]hold {data['id']}[/green] on {escape(what)}"))


@hold_app.command("lift")
def hold_lift(
    ctx: typer.Context,
    hold_id: Annotated[int, typer.Argument(metavar="ID", help="The hold's id (hold list).")],
    reason: Annotated[str, typer.Option("--reason", help="Why it is lifted; logged.")] = "",
    json_output: JsonOpt = False,
) -> None:
    """Lift legal hold ID (logged as hold.lifted; lifting a lifted hold changes nothing)."""
    from kvreg_registry.db.models import Namespace
    from kvreg_registry.services import holds

    out = output.get(ctx, json_output)
    with _write(ctx) as s:
        found = holds.get(s, None, hold_id)
        ns = s.get(Namespace, found.namespace_id)
        hold, seq = holds.lift(s, ACTOR, ns, hold_id, reason=reason)
        data = {**_hold_row(hold, ns.name), "changed": seq is not None}
    out.result(
        data,
        lambda c: c.print(
            f"lifted hold {hold_id}" if data["changed"] else f"hold {hold_id} was lifted already"
        ),
    )


@hold_app.command("list")
def hold_list(
    ctx: typer.Context,
    namespace: Annotated[str | None, typer.Argument(help="Only this namespace's holds.")] = None,
    active: Annotated[bool, typer.Option("--active", help="Only holds not lifted.")] = False,
    json_output: JsonOpt = False,
) -> None:
    """List legal holds (lifted ones too, unless --active)."""
    from kvreg_registry.services import holds

    out = output.get(ctx, json_output)
    with _read(ctx) as s:
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


def _policy_row(namespace: str, p: Any) -> dict[str, Any]:
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


@retention_app.command("set")
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
    from kvreg_registry.services import retention

    out = output.get(ctx, json_output)
    with _write(ctx) as s:
        policy, _seq = retention.set_policy(
            s, ACTOR, accounts.get_namespace(s, namespace), keep_versions=keep_versions, keep_days=keep_days
        )
        data = _policy_row(namespace, policy)
    out.result(data, lambda c: c.print(escape(_policy_text(data))))


@retention_app.command("clear")
def retention_clear(ctx: typer.Context, namespace: str, json_output: JsonOpt = False) -> None:
    """Remove NAMESPACE's retention policy: keep everything."""
    from kvreg_registry.services import retention

    out = output.get(ctx, json_output)
    with _write(ctx) as s:
        retention.clear_policy(s, ACTOR, accounts.get_namespace(s, namespace))
    data = _policy_row(namespace, None)
    out.result(data, lambda c: c.print(escape(_policy_text(data))))


@retention_app.command("show")
def retention_show(ctx: typer.Context, namespace: str, json_output: JsonOpt = False) -> None:
    """Show NAMESPACE's retention policy."""
    from kvreg_registry.services import retention

    out = output.get(ctx, json_output)
    with _read(ctx) as s:
        data = _policy_row(namespace, retention.get_policy(s, accounts.get_namespace(s, namespace)))
    out.result(data, lambda c: c.print(escape(_policy_text(data))))


# --- search --------------------------------------------------------------------------------------


@search_app.command("reindex")
def search_reindex(
    ctx: typer.Context,
    batch: Annotated[
        int, typer.Option("--batch", min=1, max=10_000, help="Envelopes per transaction.")
    ] = 200,
    json_output: JsonOpt = False,
) -> None:
    """Recompute every envelope's search text (annotations, prompt and solution text, read from
    storage) and rebuild the full-text index; rows already right are left alone."""
    from kvreg_registry.services import search

    out = output.get(ctx, json_output)
    st = open_state(ctx.meta["settings"])
    try:
        report = search.reindex(st.db, st.storage, batch=batch)
    finally:
        st.db.dispose()
    line = f"reindexed {report.envelopes} envelope(s): {report.changed} changed"
    if report.missing_text:
        line += f", {report.missing_text} with a text object missing from storage"
    if report.index_rebuilt:
        line += ", full-text index rebuilt"
    out.result(report.to_dict(), lambda c: c.print(line))


# --- garbage collection -------------------------------------------------------------------------


@app.command()
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
    settings: Settings = ctx.meta["settings"]
    st = open_state(settings)
    try:
        grace = settings.gc_grace_seconds if grace_seconds is None else grace_seconds
        report = collect_garbage(st.db, st.storage, ACTOR, grace_seconds=grace, dry_run=dry_run)
    finally:
        st.db.dispose()
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


# --- consistency check -----------------------------------------------------------------------


@app.command()
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
    from kvreg.core.errors import IntegrityError
    from kvreg_registry.services.fsck import check_registry

    out = output.get(ctx, json_output)
    st = open_state(ctx.meta["settings"])
    try:
        report = check_registry(st.db, st.storage, st.log, rehash=not no_hash)
    finally:
        st.db.dispose()
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


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``kvreg-admin`` script."""
    args = list(sys.argv[1:] if argv is None else argv)
    code = output.run(typer.main.get_command(app), args, prog_name="kvreg-admin")
    output.exit_with(code)


if __name__ == "__main__":  # pragma: no cover
    main()

"""``kvreg remote add|list|remove``, ``login``, ``logout``, ``push``, ``pull``, ``ls-remote``.

Thin commands over the use cases ``kvreg.app.remotes``, ``login``, ``push``,
``pull`` and ``ls_remote``: they parse arguments, call the use case and render
its report. On a terminal (and without
``--json``) transfers show rich progress bars on stderr; with ``--json`` there is
no progress and the report is the one JSON document on stdout. Tokens are read
from ``--token``, from stdin (``--token-stdin``) or from a hidden prompt, checked
with the registry's ``whoami`` and never printed.

Every command that contacts a registry (login, push, pull, ls-remote) verifies
its audit log's signed checkpoint against the key pinned for the remote and the
checkpoint seen before (``kvreg.remote.auditlog``), and stores the new one only
when the command succeeds. ``remote add`` contacts nothing; ``--log-key`` pins a
key learned out of band, ``--replace`` forgets the pin (a human decision; the
policy is ``kvreg.app.remotes.add_remote``'s); ``--max-checkpoint-age`` sets how
old a signed checkpoint may be before the remote is taken for frozen.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any, Protocol

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvreg import console as output
from kvreg.app import keyring, remotes
from kvreg.app import login as login_case
from kvreg.app.ls_remote import list_remote_refs
from kvreg.app.pull import pull_from_remote
from kvreg.app.push import push_to_remote
from kvreg.cli import common
from kvreg.cli.transfer_bars import human_size, transfer_bars
from kvreg.core.errors import UsageError
from kvreg.core.names import RefName

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout (no progress).")]
RemoteArg = Annotated[str, typer.Argument(metavar="NAME", help="A remote's name (see: kvreg remote list).")]
JobsOpt = Annotated[
    int,
    typer.Option(
        "--jobs",
        "-j",
        min=1,
        max=64,
        help="Objects (or object packs) transferred in parallel.",
        show_default=True,
    ),
]

_MAX_STDIN_TOKEN = 4096


def audit_line(audit: dict[str, Any] | None) -> str | None:
    """One line saying what a push or pull verified of the registry's audit log."""
    if audit is None:
        return None
    if not audit.get("verified"):
        return f"audit log: not verified ({audit.get('reason', 'unknown')})"
    cp = audit.get("checkpoint") or {}
    parts = []
    for e in audit.get("entries", []):
        how = "entry checked" if e.get("entry_checked") else "entry not readable, leaf included"
        parts.append(f"#{e['index']} {e.get('type') or '?'} ({how})")
    text = f"audit log: {', '.join(parts) or 'no entries'}; in checkpoint of {cp.get('size')} entries"
    if audit.get("notes"):
        text += "; " + "; ".join(audit["notes"])
    return text


def _parse_ref(value: str, what: str) -> RefName:
    try:
        return RefName.parse(value)
    except UsageError as e:
        raise UsageError(f"{what}: {e.message}", hint=e.hint) from e


# --- remote add / list / remove ----------------------------------------------------------------


def remote_add(
    ctx: typer.Context,
    name: RemoteArg,
    url: Annotated[
        str,
        typer.Argument(
            metavar="URL",
            help="The registry's address: http(s)://... for a kvreg registry, "
            "oci://HOST[:PORT]/REPOSITORY-PREFIX for an OCI registry.",
        ),
    ],
    replace: Annotated[
        bool,
        typer.Option(
            "--replace", help="Change an existing remote: its URL, and forget its pinned audit-log key."
        ),
    ] = False,
    log_key: Annotated[
        str | None,
        typer.Option(
            "--log-key",
            metavar="KEY",
            help="Pin the registry's audit-log key (NAME+ID+KEY, learned out of band) instead of "
            "trusting the first answer.",
        ),
    ] = None,
    max_checkpoint_age: Annotated[
        str | None,
        typer.Option(
            "--max-checkpoint-age",
            metavar="AGE",
            help="Refuse audit-log checkpoints older than AGE (90s, 30m, 24h, 7d; off: never), so that "
            "a registry that keeps serving an old state is caught (default 24h).",
        ),
    ] = None,
    insecure: Annotated[
        bool,
        typer.Option("--insecure", help="OCI registry over plain HTTP (a loopback registry only)."),
    ] = False,
    force_insecure: Annotated[
        bool,
        typer.Option(
            "--force-insecure",
            help="OCI registry over plain HTTP even off loopback: credentials and artifacts cross the "
            "network unprotected.",
        ),
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Add a registry under a short NAME (stored in $KVREG_HOME/config.json).

    Nothing is contacted; log in next if the registry needs a token. The first
    contact pins the registry's audit-log key (or --log-key pins one now); every
    later contact checks that its log only grew. --replace forgets the pin: use
    it only when the registry's operators changed it on purpose.

    Examples:

      kvreg remote add origin https://registry.example.org

      kvreg remote add origin https://registry.example.org --replace --log-key 'kvreg-log-...+...+...'

    An OCI registry (Docker's, Harbor, GHCR, ECR, GAR, ACR, Artifactory) keeps
    kvreg artifacts as OCI artifacts in repositories PREFIX/NAMESPACE. It has no
    audit log (no --log-key, no --max-checkpoint-age); kvreg remote show NAME
    says what else differs:

      kvreg remote add hub oci://ghcr.io/my-org/kv

      kvreg remote add local oci://127.0.0.1:5000/kv --insecure
    """
    out = output.get(ctx, json_output)
    added = remotes.add_remote(
        common.home(ctx),
        name,
        url,
        replace=replace,
        log_key=log_key,
        max_checkpoint_age=max_checkpoint_age,
        insecure=insecure,
        force_insecure=force_insecure,
    )

    def render(console: Console) -> None:
        kind = " (OCI registry)" if added.kind == "oci" else ""
        console.print(f"remote [bold]{escape(added.name)}[/bold] -> {escape(added.url)}{kind}")
        if added.forgot_pinned_log:
            console.print("forgot the audit-log key and checkpoint pinned for it")
        if added.log_key is not None:
            console.print(f"pinned audit-log key {escape(added.log_key)}")

    out.result(added.to_dict(), render)


def remote_list(ctx: typer.Context, json_output: JsonOpt = False) -> None:
    """List the configured remotes and whether a token is stored for each."""
    out = output.get(ctx, json_output)
    rows = [r.to_dict() for r in remotes.list_remotes(common.home(ctx))]

    def render(console: Console) -> None:
        if not rows:
            console.print("no remotes; add one with: kvreg remote add NAME URL")
            return
        table = Table()
        for col in ("name", "url", "token"):
            table.add_column(col)
        for r in rows:
            table.add_row(escape(r["name"]), escape(r["url"]), "stored" if r["logged_in"] else "-")
        console.print(table)

    out.result({"remotes": rows}, render)


def remote_show(ctx: typer.Context, name: RemoteArg, json_output: JsonOpt = False) -> None:
    """Show a remote: its address and where its credentials come from.

    For an OCI registry also what it cannot give (transparency log, receipts,
    routing) and what the client recovers.
    """
    out = output.get(ctx, json_output)
    shown = remotes.show_remote(common.home(ctx), name)

    def render(console: Console) -> None:
        kind = "OCI registry" if shown.kind == "oci" else "kvreg registry"
        console.print(f"[bold]{escape(shown.name)}[/bold]: {escape(shown.url)} ({kind})")
        if shown.insecure:
            console.print("plain HTTP (--insecure)")
        console.print(f"credentials: {escape(shown.credentials)}")
        if shown.log_key is not None:
            console.print(f"audit-log key pinned: {escape(shown.log_key)}")
        if shown.max_checkpoint_age is not None and shown.kind != "oci":
            console.print(f"checkpoints older than {shown.max_checkpoint_age} s are refused (0: never)")
        if shown.limitations:
            console.print("what an OCI registry cannot give:")
            for line in shown.limitations:
                console.print(f"  - {escape(line)}")
        if shown.recovered:
            console.print("what the client does instead:")
            for line in shown.recovered:
                console.print(f"  - {escape(line)}")

    out.result(shown.to_dict(), render)


def remote_remove(ctx: typer.Context, name: RemoteArg, json_output: JsonOpt = False) -> None:
    """Remove a remote (and its stored token, pinned audit-log key and checkpoint)."""
    out = output.get(ctx, json_output)
    removed = remotes.remove_remote(common.home(ctx), name)
    out.result(
        removed.to_dict(),
        lambda c: c.print(f"removed remote {escape(removed.name)} ({escape(removed.url)})"),
    )


# --- login / logout --------------------------------------------------------------------------


def _read_token(token: str | None, token_stdin: bool, prompt: str = "Token") -> str:
    if token is not None and token_stdin:
        raise UsageError("give the token either with --token or with --token-stdin, not both")
    if token_stdin:
        return sys.stdin.read(_MAX_STDIN_TOKEN + 1)[:_MAX_STDIN_TOKEN]
    if token is not None:
        return token
    if sys.stdin.isatty():
        return str(typer.prompt(prompt, hide_input=True, err=True))
    raise UsageError(
        "no token given",
        hint="pass --token TOKEN, or pipe it in with --token-stdin (keeps it out of the shell history)",
    )


def login(
    ctx: typer.Context,
    name: RemoteArg,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            metavar="TOKEN",
            help="The API token (kvreg_...); an OCI remote: with --username, its password or token.",
        ),
    ] = None,
    token_stdin: Annotated[bool, typer.Option("--token-stdin", help="Read the token from stdin.")] = False,
    username: Annotated[
        str | None,
        typer.Option("--username", "-u", metavar="USER", help="OCI registries: the user name."),
    ] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="OCI registries: read the password or token from stdin.")
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Store a token for the remote NAME after checking it with the registry.

    The token goes to $KVREG_HOME/credentials.json (mode 0600) and is never
    printed. Scripts may set $KVREG_TOKEN instead; it takes precedence for every
    remote.

    Examples:

      kvreg login origin --token kvreg_XXXX

      echo "$TOKEN" | kvreg login origin --token-stdin

    An OCI remote takes a user name and a password or token (as docker login
    does), checked with the registry and stored the same way. Without kvreg
    login, kvreg uses the credentials of docker login / podman login
    ($DOCKER_CONFIG/config.json or ~/.docker/config.json with credential
    helpers, $REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json,
    ~/.config/containers/auth.json):

      echo "$PASSWORD" | kvreg login hub --username me --password-stdin
    """
    out = output.get(ctx, json_output)
    home = common.home(ctx)
    if login_case.is_oci_remote(home, name):
        if username is None:
            raise UsageError(
                f"remote {name!r} is an OCI registry: give a user name",
                hint=f'echo "$PASSWORD" | kvreg login {name} --username USER --password-stdin',
            )
        report = login_case.login_oci(
            home, name, username, lambda: _read_token(token, token_stdin or password_stdin, "Password")
        )
    else:
        if username is not None or password_stdin:
            raise UsageError(
                f"remote {name!r} is a kvreg registry: it takes a token, not a user name and password",
                hint=f"kvreg login {name} --token TOKEN",
            )
        report = login_case.login(home, name, lambda: _read_token(token, token_stdin))

    def render(console: Console) -> None:
        console.print(
            f"logged in to {escape(name)} ({escape(report.url)}) as [bold]{escape(str(report.user))}[/bold]"
        )
        if report.scheme is not None:
            console.print(f"the registry authenticates with: {escape(report.scheme)}")
        if report.admin:
            console.print("server admin: every role in every namespace")
        for ns, role in sorted(report.roles.items()):
            console.print(f"  {escape(str(ns))}: {escape(str(role))}")

    out.result(report.to_dict(), render)


def logout(ctx: typer.Context, name: RemoteArg, json_output: JsonOpt = False) -> None:
    """Forget the stored token (an OCI remote: user and password) of NAME; nothing is revoked there."""
    out = output.get(ctx, json_output)
    removed = login_case.logout(common.home(ctx), name)
    out.result(
        {"remote": name, "removed": removed},
        lambda c: c.print(
            f"logged out of {escape(name)}" if removed else f"no credentials stored for {escape(name)}"
        ),
    )


# --- push / pull -----------------------------------------------------------------------------


def push(
    ctx: typer.Context,
    name: RemoteArg,
    ref: Annotated[str, typer.Argument(metavar="REF", help="The local ref to push (NS/NAME).")],
    as_: Annotated[
        str | None,
        typer.Option("--as", metavar="NS/NAME", help="The ref's name on the registry (default: REF)."),
    ] = None,
    tag: Annotated[
        bool, typer.Option("--tag", help="Create the remote ref as an immutable tag (it must not exist).")
    ] = False,
    jobs: JobsOpt = 4,
    json_output: JsonOpt = False,
) -> None:
    """Push a local artifact (objects, signed manifest, then the ref) to the remote NAME.

    Only the objects the registry lacks are sent; an interrupted push resumes
    when run again. The remote ref moves by compare-and-swap from the value read
    just before, so a concurrent change is never overwritten silently.

    Examples:

      kvreg push origin aime25/p07

      kvreg push origin aime25/p07 --as aime25/p07-v1 --tag

    To an OCI remote the artifact goes to repository PREFIX/NS, tag NAME: only the
    blobs the registry lacks are sent (mounted from another repository when kvreg
    knows one holds them), the signature follows as an OCI referrer, the tag moves
    last; --tag marks it immutable (kvreg refuses to move it).
    """
    out = output.get(ctx, json_output)
    home = common.home(ctx)
    local = _parse_ref(ref, "REF")
    target = _parse_ref(as_, "--as") if as_ is not None else None
    known = keyring.local_public_keys(home).values()
    with transfer_bars(out, f"push {local}") as progress:
        report = push_to_remote(
            home, name, local, remote_ref=target, tag=tag, jobs=jobs, progress=progress, known_keys=known
        )
    data = report.to_dict()

    def render(console: Console) -> None:
        what = _ref_change(report)
        console.print(
            f"pushed {escape(report.ref)} to {escape(name)} as [bold]{escape(report.remote_ref)}[/bold]: "
            f"{report.objects_sent} of {report.objects_total} objects sent "
            f"({human_size(report.bytes_sent)}), ref {what}"
        )
        if report.objects_mounted:
            console.print(f"{report.objects_mounted} blob(s) mounted from another repository (no bytes sent)")
        if report.oci is not None:
            console.print(f"OCI manifest {report.oci['repository']}@{report.oci['manifest']}")
        console.print(f"manifest {report.digest}")
        line = audit_line(report.audit)
        if line:
            console.print(escape(line))

    out.result(data, render)


class _RefChange(Protocol):
    """What ``_ref_change`` reads of a push's or pull's report (frozen dataclasses)."""

    @property
    def ref_changed(self) -> bool: ...
    @property
    def old(self) -> str | None: ...
    @property
    def tag(self) -> bool: ...


def _ref_change(report: _RefChange) -> str:
    """How a push or pull changed its ref, in words."""
    if not report.ref_changed:
        return "already up to date"
    what = "created" if report.old is None else f"moved from {report.old}"
    return what + " (tag)" if report.tag else what


def pull(
    ctx: typer.Context,
    name: RemoteArg,
    ref: Annotated[str, typer.Argument(metavar="REF", help="The registry's ref to pull (NS/NAME).")],
    as_: Annotated[
        str | None,
        typer.Option("--as", metavar="NS/NAME", help="The local ref to set (default: REF)."),
    ] = None,
    jobs: JobsOpt = 4,
    lazy: Annotated[
        bool,
        typer.Option(
            "--lazy",
            help="Fetch only the manifest and the tokens; chunks, witness and text stay on the registry "
            "(a later pull without --lazy, or kvreg ask --remote, fetches them).",
        ),
    ] = False,
    pin: Annotated[
        bool, typer.Option("--pin", help="Pin the local ref: eviction never removes what it reaches.")
    ] = False,
    allow_rollback: Annotated[
        bool,
        typer.Option(
            "--allow-rollback",
            help="OCI remotes: accept a tag moved back to an artifact seen and replaced before, or older "
            "than the newest seen (refused otherwise, exit 3).",
        ),
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Pull an artifact from the remote NAME: verify its signature, fetch what is missing, set the ref.

    The signature is checked against this store's trust policy (kvreg trust
    list) for the local ref's namespace before any object is downloaded; every
    object is checked against its digest before it enters the store (a mismatch
    stores nothing and exits 3). An interrupted pull resumes when run again.
    With store.max-bytes set, the store is then brought back under its budget
    (never evicting this artifact or a pinned ref's objects).

    Examples:

      kvreg pull origin aime25/p07

      kvreg pull origin aime25/p07 --as mine/p07 -j 8

      kvreg pull origin aime25/p07 --lazy

    From an OCI remote the same checks run (the signature, found as an OCI
    referrer, against the local trust policy before any chunk; every blob
    against its digest; the OCI layers against the signed manifest). With no
    audit log to prove the tag's history, kvreg keeps its own record of the tags
    it has seen and refuses a tag moved back (exit 3) unless --allow-rollback.
    """
    out = output.get(ctx, json_output)
    home = common.home(ctx)
    remote_ref = _parse_ref(ref, "REF")
    local = _parse_ref(as_, "--as") if as_ is not None else None
    known = keyring.local_public_keys(home).values()
    with transfer_bars(out, f"pull {remote_ref}") as progress:
        report = pull_from_remote(
            home,
            name,
            remote_ref,
            local_ref=local,
            jobs=jobs,
            progress=progress,
            known_keys=known,
            lazy=lazy,
            pin=pin,
            allow_rollback=allow_rollback,
        )
    data = report.to_dict()

    def render(console: Console) -> None:
        fetched = report.objects_downloaded + report.objects_staged
        what = _ref_change(report)
        console.print(
            f"pulled {escape(report.ref)} from {escape(name)} as [bold]{escape(report.local_ref)}[/bold]: "
            f"{fetched} of {report.objects_total} objects fetched ({human_size(report.bytes_downloaded)}), "
            f"{report.objects_local} already here; ref {what}"
        )
        if report.lazy:
            console.print(
                f"lazy: {report.objects_deferred} object(s) left on the registry "
                f"(fetch them: kvreg pull {escape(name)} {escape(report.ref)})"
            )
        if report.pinned:
            console.print(f"pinned {escape(report.local_ref)}")
        ev = report.eviction
        if ev is not None and ev["evicted"]:
            console.print(
                f"evicted {len(ev['evicted'])} other object(s) ({human_size(ev['bytes_freed'])}) "
                "to stay under store.max-bytes"
            )
        for warning in report.warnings:
            console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
        console.print(f"manifest {report.digest}, signed by {report.signer or '?'}")
        line = audit_line(report.audit)
        if line:
            console.print(escape(line))

    out.result(data, render)


# --- ls-remote -------------------------------------------------------------------------------


def ls_remote(
    ctx: typer.Context,
    name: RemoteArg,
    namespace: Annotated[
        str | None,
        typer.Argument(
            metavar="[NAMESPACE]",
            help="Only this namespace (default: every one you can read; an OCI registry that does not "
            "list its repositories (/v2/_catalog) needs it).",
        ),
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """List the refs of the remote NAME, with the digest each one names.

    Of an OCI remote: the tags of its repositories that hold kvreg artifacts (the
    referrers tags, sha256-<hex>, are left out).

    Examples:

      kvreg ls-remote origin

      kvreg ls-remote origin aime25 --json
    """
    out = output.get(ctx, json_output)
    listed = list_remote_refs(common.home(ctx), name, namespace)
    rows = listed.refs

    def render(console: Console) -> None:
        if not rows:
            where = f"namespace {namespace}" if namespace else "any namespace you can read"
            console.print(f"no refs in {escape(where)} on {escape(name)}")
            return
        table = Table()
        for col in ("ref", "digest", "tag", "updated"):
            table.add_column(col, no_wrap=True)
        for r in rows:
            table.add_row(
                escape(r["ref"]), r["digest"][:23], "tag" if r["tag"] else "", escape(r["updated_at"] or "-")
            )
        console.print(table)

    out.result(listed.to_dict(), render)


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        help="Registries this store pushes to and pulls from (kvreg remote add NAME URL).",
        no_args_is_help=True,
    )
    group.command("add")(remote_add)
    group.command("list")(remote_list)
    group.command("show")(remote_show)
    group.command("remove")(remote_remove)
    app.add_typer(group, name="remote")
    app.command("login")(login)
    app.command("logout")(logout)
    app.command("push")(push)
    app.command("pull")(pull)
    app.command("ls-remote")(ls_remote)

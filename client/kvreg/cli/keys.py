"""``kvreg keys generate | list | export``: the Ed25519 keys that sign deposits.

Keys live in ``$KVREG_HOME/keys/<name>.key`` (PEM PKCS#8, mode 0600) with the
public half next to it in ``<name>.pub`` (``ed25519:<base64>``). ``generate`` also
trusts the new key for every namespace (``"*"``) in this store's trust policy,
unless ``--no-trust``.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvreg import console as output
from kvreg.app import keyring
from kvreg.cli import common
from kvreg.console import JsonOpt
from kvreg.core.errors import KeyFileError
from kvreg.core.keys import SigningKey
from kvreg.core.trust import WILDCARD, TrustPolicy
from kvreg.fileio.atomicfile import atomic_write_bytes
from kvreg.fileio.keyfiles import load_trust_policy, save_signing_key, save_trust_policy

NameOpt = Annotated[str, typer.Option("--name", "-n", help="Key name (a file name under keys/).")]


def generate(
    ctx: typer.Context,
    name: NameOpt = keyring.DEFAULT_KEY_NAME,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing key of that name.")] = False,
    no_trust: Annotated[
        bool, typer.Option("--no-trust", help="Do not add the public key to this store's trust policy.")
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Generate a signing key (and trust it here for every namespace, unless --no-trust)."""
    out = output.get(ctx, json_output)
    home = common.home(ctx).ensure()
    path = keyring.key_path(home, name)
    if path.exists() and not force:
        raise KeyFileError(
            f"a key named {name!r} exists already ({path})",
            hint="use --force to replace it (the old key is lost), or choose another --name",
        )
    key = SigningKey.generate()
    save_signing_key(key, path, overwrite=force)
    public = key.public_key
    atomic_write_bytes(keyring.pub_path(home, name), (public.to_text() + "\n").encode("ascii"), mode=0o644)
    trusted = False
    if not no_trust:
        policy = load_trust_policy(home.trust_path)
        policy.allow(WILDCARD, public)
        save_trust_policy(policy, home.trust_path)
        trusted = True
    data = {
        "name": name,
        "keyid": public.keyid,
        "public_key": public.to_text(),
        "path": str(path),
        "trusted_for": [WILDCARD] if trusted else [],
    }

    def render(console: Console) -> None:
        console.print(f"[green]Generated key[/green] {escape(name)}: {escape(str(path))} (mode 0600)")
        console.print(f"  keyid       {public.keyid}")
        console.print(f"  public key  {public.to_text()}")
        if trusted:
            console.print(
                f"  [green]trusted[/green] for every namespace ('*') in {escape(str(home.trust_path))}"
            )
        else:
            console.print("  [yellow]not trusted[/yellow] here (--no-trust); others add it with:")
            console.print(f"    kvreg trust add NAMESPACE {public.to_text()}")

    out.result(data, render)


def _trusted_for(policy: TrustPolicy, keyid: str) -> list[str]:
    return [pattern for pattern, keys in policy.namespaces().items() if any(k.keyid == keyid for k in keys)]


def list_keys(ctx: typer.Context, json_output: JsonOpt = False) -> None:
    """List the signing keys in this store."""
    out = output.get(ctx, json_output)
    home = common.home(ctx)
    policy = load_trust_policy(home.trust_path)
    rows: list[dict[str, Any]] = []
    for name, public in keyring.local_public_keys(home).items():
        rows.append(
            {
                "name": name,
                "keyid": public.keyid,
                "public_key": public.to_text(),
                "private": keyring.key_path(home, name).exists(),
                "trusted_for": _trusted_for(policy, public.keyid),
            }
        )

    def render(console: Console) -> None:
        if not rows:
            console.print("no keys; create one with: kvreg keys generate")
            return
        table = Table(title=f"keys in {home.keys_dir}")
        for col in ("name", "keyid", "public key", "private", "trusted for"):
            table.add_column(col)
        for r in rows:
            table.add_row(
                escape(r["name"]),
                r["keyid"][:19] + "…",
                r["public_key"],
                "yes" if r["private"] else "no",
                ", ".join(r["trusted_for"]) or "-",
            )
        console.print(table)

    out.result({"keys": rows}, render)


def export(
    ctx: typer.Context, name: NameOpt = keyring.DEFAULT_KEY_NAME, json_output: JsonOpt = False
) -> None:
    """Print a key's public half (ed25519:...), for `kvreg trust add` elsewhere."""
    out = output.get(ctx, json_output)
    home = common.home(ctx)
    public = keyring.local_public_keys(home).get(keyring.validate_key_name(name))
    if public is None:
        raise KeyFileError(
            f"no key named {name!r} in {home.keys_dir}", hint="list them with: kvreg keys list"
        )
    data = {"name": name, "keyid": public.keyid, "public_key": public.to_text()}
    out.result(data, lambda console: console.print(public.to_text()))


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Signing keys: generate, list, export.", no_args_is_help=True)
    group.command("generate")(generate)
    group.command("list")(list_keys)
    group.command("export")(export)
    app.add_typer(group, name="keys")

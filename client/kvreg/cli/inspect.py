"""``kvreg show``, ``kvreg ls``, ``kvreg cat``: read the local store.

``show`` prints an artifact's manifest after checking its digest and signature
(``--json``: the manifest document and nothing else). ``ls`` lists refs with a
summary of their manifests (no signature checks: it is a listing). ``cat``
writes an object's raw bytes to stdout after re-hashing them, and records the
read in the store's access log (the LRU order of disk paging, ``kvreg.store.access_log``).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from kvreg import console as output
from kvreg.app import keyring
from kvreg.cli import common
from kvreg.console import JsonOpt
from kvreg.core.digest import Digest
from kvreg.core.envelope import Envelope
from kvreg.core.errors import KvregError
from kvreg.core.manifest import Manifest
from kvreg.store import access_log
from kvreg.store.artifacts import resolve

_TEXT_PREVIEW = 600


def _render_manifest(
    console: Console, m: Manifest, ref: str | None, signers: list[str], text: str | None
) -> None:
    head = Table(show_header=False, box=None, pad_edge=False)
    head.add_column(style="bold")
    head.add_column()
    head.add_row("ref", escape(ref or "-"))
    head.add_row("manifest", str(m.digest))
    head.add_row("signed by", ", ".join(signers) or "-")
    head.add_row("created", m.created or "-")
    head.add_row(
        "model",
        f"{escape(m.model.name)} ({m.model.architecture}, {m.model.num_layers} layers, "
        f"{m.model.kv_heads} kv heads × {m.model.head_dim}, {m.model.dtype}) {m.model.fingerprint.short()}",
    )
    head.add_row("tokenizer", f"{escape(m.tokenizer.name)} {m.tokenizer.fingerprint.short()}")
    f = m.config_fields
    head.add_row(
        "config",
        f"{m.config.fingerprint.short()} profile {m.config.profile}, dtype {f.get('dtype')}, "
        f"attn {f.get('attn_implementation')}, threads {f.get('threads')}, device {f.get('device')}, "
        f"cpu {f.get('cpu_capability')}",
    )
    head.add_row("tokens", f"{m.token_count} in blocks of {m.block_size}")
    if m.prompt is not None:
        head.add_row("prompt", f"{m.prompt.token_count} tokens")
    head.add_row("merkle root", str(m.merkle_root))
    head.add_row("witness", f"{m.witness.logits_digest.short()} ({m.witness.dtype} {list(m.witness.shape)})")
    v = m.verification
    if v is not None:
        head.add_row("verification", f"{escape(v.verifier)}: {v.verdict} {escape(str(v.evidence))}")
    notes = m.annotations
    for key in ("title", "question", "answer"):
        if key in notes:
            head.add_row(key, escape(str(notes[key])))
    if notes.get("tags"):
        head.add_row("tags", escape(", ".join(notes["tags"])))
    console.print(head)
    chunks = Table(title=f"{len(m.chunks)} chunks")
    for col in ("#", "tokens", "digest", "bytes"):
        chunks.add_column(col, justify="right" if col in ("#", "bytes") else "left")
    for c in m.chunks:
        chunks.add_row(str(c.index), f"{c.start}-{c.end}", str(c.digest), str(c.size))
    console.print(chunks)
    if text is not None:
        preview = text if len(text) <= _TEXT_PREVIEW else text[:_TEXT_PREVIEW] + " …"
        console.print(Panel(escape(preview), title="text", expand=False))


def show(
    ctx: typer.Context,
    target: Annotated[str, typer.Argument(metavar="REF|DIGEST", help="NS/NAME or sha256:<hex>.")],
    unverified: Annotated[
        bool,
        typer.Option(
            "--unverified", help="Show even if no trusted key signed it (the digest is still checked)."
        ),
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Show an artifact's manifest (verified: digest and signature)."""
    out = output.get(ctx, json_output)
    home = common.home(ctx)
    resolved = resolve(home, target)
    if unverified:
        manifest = Manifest.from_bytes(home.objects.read(resolved.digest, verify=True))
        try:
            envelope = Envelope.from_json_bytes(home.envelopes.get(resolved.digest))
            claimed = [s.keyid or "?" for s in envelope.signatures]
        except KvregError:
            claimed = []
        signers = [*claimed, "[yellow](signature not checked: --unverified)[/yellow]"]
    else:
        artifact = keyring.open_verified(home, target)
        manifest = artifact.manifest
        signers = [s.keyid or "?" for s in artifact.envelope.signatures]
    text: str | None = None
    if not out.json:
        try:
            text = home.objects.read(manifest.text.digest, verify=True).decode("utf-8", errors="replace")
        except KvregError:
            text = None
    ref = str(resolved.ref) if resolved.ref else None
    out.result(manifest.to_dict(), lambda c: _render_manifest(c, manifest, ref, signers, text))


def _summary(home: Any, digest: Digest) -> dict[str, Any]:
    m = Manifest.from_bytes(home.objects.read(digest, verify=True))
    v = m.verification
    return {
        "token_count": m.token_count,
        "chunk_count": len(m.chunks),
        "block_size": m.block_size,
        "model": m.model.name,
        "dtype": m.model.dtype,
        "verdict": v.verdict if v else None,
        "verifier": v.verifier if v else None,
        "title": m.annotations.get("title"),
        "created": m.created,
    }


def ls(ctx: typer.Context, json_output: JsonOpt = False) -> None:
    """List refs with their manifests: digest, tokens, chunks, verdict, title."""
    out = output.get(ctx, json_output)
    home = common.home(ctx)
    rows: list[dict[str, Any]] = []
    for entry in home.refs.list():
        row: dict[str, Any] = {"ref": str(entry.ref), "digest": str(entry.digest), "tag": entry.tag}
        try:
            row.update(_summary(home, entry.digest))
        except KvregError as e:
            row["error"] = e.to_dict()
        rows.append(row)

    def render(console: Console) -> None:
        if not rows:
            console.print(f"no refs in {escape(str(home.root))}")
            return
        table = Table()
        for col in ("ref", "digest", "tokens", "chunks", "model", "verdict", "title"):
            table.add_column(col, justify="right" if col in ("tokens", "chunks") else "left")
        for r in rows:
            if "error" in r:
                table.add_row(
                    escape(r["ref"]),
                    Digest(r["digest"]).short(),
                    "",
                    "",
                    "",
                    "",
                    f"[red]{escape(r['error']['message'])}[/red]",
                )
                continue
            table.add_row(
                escape(r["ref"]) + (" (tag)" if r["tag"] else ""),
                Digest(r["digest"]).short(),
                str(r["token_count"]),
                str(r["chunk_count"]),
                escape(f"{r['model']} {r['dtype']}"),
                r["verdict"] or "-",
                escape(r["title"] or ""),
            )
        console.print(table)

    out.result({"refs": rows}, render)


def cat(
    ctx: typer.Context,
    digest: Annotated[str, typer.Argument(metavar="DIGEST", help="sha256:<hex> of an object.")],
) -> None:
    """Write an object's raw bytes to stdout (re-hashed first)."""
    out = output.get(ctx)
    home = common.home(ctx)
    target = Digest(digest)
    data = home.objects.read(target, verify=True)
    access_log.touch(home, [target])
    out.write_bytes(data)


def register(app: typer.Typer) -> None:
    app.command("show")(show)
    app.command("ls")(ls)
    app.command("cat")(cat)

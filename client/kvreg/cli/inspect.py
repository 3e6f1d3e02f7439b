"""``kvreg show``, ``kvreg ls``, ``kvreg cat``: read the local store.

``show`` prints an artifact's manifest after checking its digest and signature
(``--json``: the manifest document and nothing else). ``ls`` lists refs with a
summary of their manifests (no signature checks: it is a listing). ``cat``
writes an object's raw bytes to stdout after re-hashing them, and records the
read in the store's access log (the LRU order of disk paging). The commands parse
and render; the reading is the use cases' of ``kvreg.app.inspect``.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from kvreg import console as output
from kvreg.app.inspect import list_refs, read_object, show_artifact
from kvreg.cli import common
from kvreg.console import JsonOpt
from kvreg.core.digest import Digest
from kvreg.core.manifest import Manifest

_TEXT_PREVIEW = 600
_UNVERIFIED_NOTE = "[yellow](signature not checked: --unverified)[/yellow]"


def prompt_line(m: Manifest) -> str:
    """The prompt's row: its tokens, and how it was chat-rendered if it was."""
    if m.prompt is None:
        return "-"
    line = f"{m.prompt.token_count} tokens"
    chat = m.prompt.chat
    if chat is not None:
        generation = "with" if chat.generation_prompt else "without"
        line += (
            f", chat-rendered (template {chat.template.short()}, messages {chat.messages.short()}, "
            f"{generation} generation prompt)"
        )
    return line


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
        head.add_row("prompt", prompt_line(m))
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
    shown = show_artifact(common.home(ctx), target, unverified=unverified, with_text=not out.json)
    signers = shown.signers if shown.signature_checked else [*shown.signers, _UNVERIFIED_NOTE]
    out.result(shown.to_dict(), lambda c: _render_manifest(c, shown.manifest, shown.ref, signers, shown.text))


def ls(ctx: typer.Context, json_output: JsonOpt = False) -> None:
    """List refs with their manifests: digest, tokens, chunks, verdict, title."""
    out = output.get(ctx, json_output)
    listing = list_refs(common.home(ctx))
    rows = listing.refs

    def render(console: Console) -> None:
        if not rows:
            console.print(f"no refs in {escape(str(listing.root))}")
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

    out.result(listing.to_dict(), render)


def cat(
    ctx: typer.Context,
    digest: Annotated[str, typer.Argument(metavar="DIGEST", help="sha256:<hex> of an object.")],
) -> None:
    """Write an object's raw bytes to stdout (re-hashed first)."""
    out = output.get(ctx)
    out.write_bytes(read_object(common.home(ctx), digest))


def register(app: typer.Typer) -> None:
    app.command("show")(show)
    app.command("ls")(ls)
    app.command("cat")(cat)

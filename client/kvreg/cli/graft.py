"""``kvreg graft`` and ``kvreg verify``: put a stored state back, and check artifacts.

``graft`` opens the artifact (signature against the trust policy), reads its
tokens, loads the model under the artifact's recorded config (options override
it, which the engine then refuses by fingerprint), grafts, decodes, and with
``--check`` compares every decode step with a fresh computation (exit 3 unless
byte-exact).

``verify`` re-hashes every object of an artifact and checks the signature, the
Merkle root and the token count; with ``--model --recompute`` it also recomputes
every chunk and the witness. Any mismatch exits 3.

Both read the manifest before the engine loads: the recorded profile decides the
environment torch must start with.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from kvreg.cli import common, output
from kvreg.cli.engine_options import (
    AttnOpt,
    DeviceOpt,
    DtypeOpt,
    EngineChoice,
    ProfileOpt,
    ThreadsOpt,
    load_engine,
    settings_for_recorded,
)
from kvreg.core.errors import (
    DigestMismatchError,
    IntegrityError,
    KvregError,
    NotByteExactError,
    ObjectNotFoundError,
    UsageError,
)
from kvreg.store.artifacts import Artifact, read_tokens

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
RefArg = Annotated[str, typer.Argument(metavar="REF", help="NS/NAME or a manifest digest sha256:<hex>.")]


def _check_table(check: dict[str, Any]) -> Table:
    table = Table(title="check against a fresh computation (same schedule)")
    table.add_column("byte-exact")
    table.add_column("steps", justify="right")
    table.add_column("SHA-256-equal steps", justify="right")
    table.add_column("max KL", justify="right")
    table.add_column("argmax agreement", justify="right")
    ok = check["byte_exact"]
    table.add_row(
        "[green]yes[/green]" if ok else "[red]NO[/red]",
        str(check["steps"]),
        str(check["sha256_equal_steps"]),
        f"{check['max_kl']:.3g}",
        f"{100 * check['argmax_agreement']:.1f}%",
    )
    return table


def graft_cmd(
    ctx: typer.Context,
    ref: RefArg,
    model: Annotated[
        Path, typer.Option("--model", metavar="MODEL", help="A local Hugging Face model directory.")
    ],
    prompt_file: Annotated[
        Path | None,
        typer.Option(
            "--prompt-file", metavar="FILE", help="The full prompt (UTF-8); must begin with the artifact."
        ),
    ] = None,
    append_file: Annotated[
        Path | None,
        typer.Option("--append-file", metavar="FILE", help="Text to append after the artifact's own tokens."),
    ] = None,
    blocks: Annotated[
        int | None,
        typer.Option(
            "--blocks", min=1, metavar="K", help="Graft only the first K blocks (a block boundary)."
        ),
    ] = None,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", min=1, help="Tokens to decode.")] = 32,
    check: Annotated[
        bool, typer.Option("--check", help="Compare with a fresh computation; exit 3 unless byte-exact.")
    ] = False,
    no_probe: Annotated[
        bool, typer.Option("--no-probe", help="Skip the witness probe (recomputing the last grafted block).")
    ] = False,
    trust_store: Annotated[
        bool, typer.Option("--trust-store", help="Do not re-hash the chunks (trust the read-only store).")
    ] = False,
    shift_after_file: Annotated[
        Path | None,
        typer.Option(
            "--shift-after-file",
            metavar="FILE",
            help="APPROXIMATE: place the artifact after this text by re-rotating its keys, and report the "
            "residual against a fresh run. Never byte-exact.",
        ),
    ] = None,
    dtype: DtypeOpt = None,
    threads: ThreadsOpt = None,
    attn: AttnOpt = None,
    profile: ProfileOpt = None,
    device: DeviceOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Graft a stored KV state into MODEL and continue decoding from it."""
    out = output.get(ctx, json_output)
    if prompt_file is not None and append_file is not None:
        raise UsageError("give --prompt-file or --append-file, not both")
    if shift_after_file is not None and (prompt_file or append_file or blocks or check):
        raise UsageError(
            "--shift-after-file cannot be combined with --prompt-file, --append-file, --blocks or --check"
        )
    prompt_text = common.read_text_file(prompt_file, what="prompt file") if prompt_file else None
    append_text = common.read_text_file(append_file, what="append file") if append_file else None
    home = common.home(ctx)
    artifact = common.open_verified(home, ref)
    manifest = artifact.manifest
    tokens = read_tokens(home, manifest)
    fields = settings_for_recorded(
        manifest.config_fields, EngineChoice(dtype, threads, attn, profile, device)
    )
    lm, load_seconds = load_engine(out, model, fields, home)
    if shift_after_file is not None:
        prefix_text = common.read_text_file(shift_after_file, what="shift prefix file")
        _shifted(out, lm, home, artifact, tokens, prefix_text, max_new_tokens)
        return
    from kvreg.engine.check import check_graft
    from kvreg.engine.graft import continue_decoding, graft

    prompt: list[int] | None = None
    if prompt_text is not None:
        prompt = lm.encode(prompt_text, first=True)
    elif append_text is not None:
        prompt = tokens + lm.encode(append_text, first=False)
    with out.status(f"grafting {artifact.digest.short()}"):
        outcome = graft(
            lm, home, manifest, tokens, prompt, blocks=blocks, verify=not trust_store, probe=not no_probe
        )
    with out.status(f"decoding {max_new_tokens} tokens"):
        decoded = continue_decoding(lm, outcome, max_new_tokens)
    comparison: dict[str, Any] | None = None
    if check:
        started = time.perf_counter()
        with out.status("checking against a fresh computation"):
            comparison = check_graft(lm, outcome.plan, decoded).to_dict()
        outcome.timings["check_seconds"] = time.perf_counter() - started
    plan = outcome.plan
    timings = {"load_seconds": load_seconds, **outcome.timings}
    output_text = lm.decode(decoded.tokens)
    data: dict[str, Any] = {
        "ref": str(artifact.ref) if artifact.ref else None,
        "manifest_digest": str(artifact.digest),
        "prompt_tokens": len(plan.prompt),
        "graft_tokens": plan.graft_tokens,
        "prefill_tokens": plan.prefill_tokens,
        "chunks_read": plan.chunks,
        "whole_artifact": plan.whole,
        "bytes_read": outcome.chunks.bytes_read,
        "verified": outcome.chunks.verified,
        "probe": outcome.probe,
        "decoded_tokens": len(decoded.tokens),
        "timings": {k: round(v, 6) for k, v in timings.items()},
        "output_text": output_text,
        "output_tokens": decoded.tokens,
    }
    if comparison is not None:
        data["check"] = comparison
    error: KvregError | None = None
    if comparison is not None and not comparison["byte_exact"]:
        error = NotByteExactError(
            f"the graft is not byte-exact: {comparison['sha256_equal_steps']} of {comparison['steps']} "
            f"decode steps have SHA-256-equal logits (first divergence at step "
            f"{comparison.get('first_divergent_step')})",
            hint="the numerics of this host differ from the depositor's in a way the fingerprint missed",
        )

    def render(console: Console) -> None:
        summary = Table(show_header=False, box=None, pad_edge=False)
        summary.add_column(style="bold")
        summary.add_column()
        summary.add_row("artifact", f"{escape(data['ref'] or '-')} {artifact.digest}")
        summary.add_row(
            "graft point",
            f"token {plan.graft_tokens} of {manifest.token_count} "
            f"({plan.chunks} chunk{'s' if plan.chunks != 1 else ''}"
            f"{', the whole artifact' if plan.whole else ''})",
        )
        summary.add_row(
            "tokens",
            f"{plan.graft_tokens} grafted, {plan.prefill_tokens} prefilled, {len(decoded.tokens)} decoded",
        )
        summary.add_row(
            "chunks",
            f"{plan.chunks} read, {outcome.chunks.bytes_read} bytes, "
            + ("re-hashed" if outcome.chunks.verified else "[yellow]not re-hashed (--trust-store)[/yellow]"),
        )
        if outcome.probe is not None:
            what = f"block {outcome.probe.get('block')} recomputed, KV equal"
            if "witness_equal" in outcome.probe:
                what += ", next-token logits equal to the witness"
            summary.add_row("probe", f"[green]passed[/green] ({what})")
        else:
            summary.add_row("probe", "skipped")
        summary.add_row(
            "timings", ", ".join(f"{k.removesuffix('_seconds')} {v:.3f} s" for k, v in timings.items())
        )
        console.print(summary)
        console.print(Panel(escape(output_text), title="decoded text", expand=False))
        if comparison is not None:
            console.print(_check_table(comparison))

    out.result(data, render, error=error)


def _shifted(
    out: output.Output,
    lm: Any,
    home: Any,
    artifact: Artifact,
    tokens: list[int],
    prefix_text: str,
    steps: int,
) -> None:
    """The labelled approximate mode: never reported as exact, never an exit-3 check."""
    from kvreg.engine.shifted import shifted_graft

    with out.status("shifted graft (approximate) and a fresh run to measure the residual"):
        report = shifted_graft(
            lm, home, artifact.manifest, tokens, lm.encode(prefix_text, first=True), steps=steps
        )
    data = {
        "ref": str(artifact.ref) if artifact.ref else None,
        "manifest_digest": str(artifact.digest),
        **report.to_dict(),
        "output_text": lm.decode(report.output_tokens),
    }

    def render(console: Console) -> None:
        console.print("[bold yellow]APPROXIMATE[/bold yellow] shifted graft — not byte-exact by construction")
        table = Table(show_header=False, box=None)
        table.add_column(style="bold")
        table.add_column()
        table.add_row("offset", f"{data['offset']} tokens ({data['shifted_tokens']} re-rotated)")
        table.add_row("max |Δlogits|", f"{data['max_abs_logit_diff']:.3g}")
        table.add_row("max KL", f"{data['max_kl']:.3g}")
        table.add_row("argmax agreement", f"{100 * data['argmax_agreement']:.1f}% over {data['steps']} steps")
        console.print(table)
        console.print(Panel(escape(data["output_text"]), title="decoded text (approximate)", expand=False))

    out.result(data, render)


# --- verify ----------------------------------------------------------------------------


def _rehash(home: Any, artifact: Artifact) -> dict[str, Any]:
    """Re-hash every object the manifest references; collect what is wrong."""
    manifest = artifact.manifest
    missing: list[str] = []
    corrupt: list[dict[str, str]] = []
    checked = 0
    total = 0
    sizes = {str(c.digest): c.size for c in manifest.chunks}
    for digest in manifest.object_digests():
        try:
            data = home.objects.read(digest, verify=True)
        except ObjectNotFoundError:
            missing.append(str(digest))
            continue
        except DigestMismatchError as e:
            corrupt.append({"digest": str(digest), "message": e.message})
            continue
        checked += 1
        total += len(data)
        expected = sizes.get(str(digest))
        if expected is not None and expected != len(data):
            corrupt.append(
                {"digest": str(digest), "message": f"size {len(data)}, the manifest says {expected}"}
            )
    if (
        home.objects.has(manifest.text.digest)
        and home.objects.size(manifest.text.digest) != manifest.text.size
    ):
        corrupt.append(
            {"digest": str(manifest.text.digest), "message": "text size differs from the manifest"}
        )
    tokens_ok = True
    token_message = None
    try:
        read_tokens(home, manifest)
    except (IntegrityError, ObjectNotFoundError) as e:
        tokens_ok = False
        token_message = e.message
    return {
        "checked": checked,
        "bytes_hashed": total,
        "missing": missing,
        "corrupt": corrupt,
        "tokens_ok": tokens_ok,
        "tokens_message": token_message,
    }


def verify_cmd(
    ctx: typer.Context,
    ref: RefArg,
    model: Annotated[
        Path | None,
        typer.Option("--model", metavar="MODEL", help="Also check that this model can graft the artifact."),
    ] = None,
    recompute: Annotated[
        bool, typer.Option("--recompute", help="Recompute every chunk and the witness with --model.")
    ] = False,
    dtype: DtypeOpt = None,
    threads: ThreadsOpt = None,
    attn: AttnOpt = None,
    profile: ProfileOpt = None,
    device: DeviceOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Verify an artifact: signature, Merkle root, every object's digest; --recompute with --model."""
    out = output.get(ctx, json_output)
    if recompute and model is None:
        raise UsageError("--recompute needs --model MODEL")
    home = common.home(ctx)
    artifact = common.open_verified(home, ref)  # digest of the manifest, signature, schema, Merkle root
    manifest = artifact.manifest
    with out.status(f"re-hashing the objects of {artifact.digest.short()}"):
        objects = _rehash(home, artifact)
    data: dict[str, Any] = {
        "ref": str(artifact.ref) if artifact.ref else None,
        "manifest_digest": str(artifact.digest),
        "signature": True,
        "merkle_root": str(manifest.merkle_root),
        "merkle_root_ok": True,
        "token_count": manifest.token_count,
        "chunk_count": len(manifest.chunks),
        "objects": objects,
        "compatible": None,
        "recompute": None,
    }
    problems: list[str] = []
    if objects["missing"]:
        problems.append(f"{len(objects['missing'])} object(s) missing")
    if objects["corrupt"]:
        problems.append(f"{len(objects['corrupt'])} object(s) damaged")
    if not objects["tokens_ok"]:
        problems.append(f"tokens: {objects['tokens_message']}")
    if model is not None and not problems:
        fields = settings_for_recorded(
            manifest.config_fields, EngineChoice(dtype, threads, attn, profile, device)
        )
        lm, _ = load_engine(out, model, fields, home)
        from kvreg.engine.check import recompute_artifact
        from kvreg.engine.graft import check_compatible

        check_compatible(lm, manifest)
        data["compatible"] = True
        if recompute:
            with out.status(f"recomputing {len(manifest.chunks)} chunks"):
                report = recompute_artifact(lm, manifest, read_tokens(home, manifest)).to_dict()
            data["recompute"] = report
            if not report["byte_exact"]:
                problems.append(
                    f"recomputed chunks differ: {report['mismatched_chunks']}, witness equal: "
                    f"{report['witness_equal']}"
                )
    data["ok"] = not problems
    error: KvregError | None = None
    if problems:
        if objects["corrupt"] or objects["missing"]:
            error = DigestMismatchError("verification failed: " + "; ".join(problems), hint="run: kvreg fsck")
        elif data["recompute"] is not None and not data["recompute"]["byte_exact"]:
            error = NotByteExactError("verification failed: " + "; ".join(problems))
        else:
            error = IntegrityError("verification failed: " + "; ".join(problems))

    def render(console: Console) -> None:
        table = Table(show_header=False, box=None, pad_edge=False)
        table.add_column(style="bold")
        table.add_column()
        table.add_row("artifact", f"{escape(data['ref'] or '-')} {artifact.digest}")
        table.add_row("signature", "[green]trusted signer[/green]")
        table.add_row("merkle root", f"[green]ok[/green] {manifest.merkle_root}")
        table.add_row(
            "objects",
            f"{objects['checked']} re-hashed ({objects['bytes_hashed']} bytes), "
            f"{len(objects['missing'])} missing, {len(objects['corrupt'])} damaged",
        )
        table.add_row(
            "tokens",
            f"{manifest.token_count} " + ("[green]ok[/green]" if objects["tokens_ok"] else "[red]bad[/red]"),
        )
        if data["compatible"]:
            table.add_row("model", "[green]fingerprints match[/green]")
        if data["recompute"] is not None:
            r = data["recompute"]
            state = "[green]byte-exact[/green]" if r["byte_exact"] else "[red]differs[/red]"
            table.add_row(
                "recompute",
                f"{state}: {r['chunks_equal']}/{r['chunks']} chunks equal, "
                f"witness equal: {r['witness_equal']}",
            )
        console.print(table)
        console.print("[green]verified[/green]" if data["ok"] else "[red]verification failed[/red]")

    out.result(data, render, error=error)


def register(app: typer.Typer) -> None:
    app.command("graft")(graft_cmd)
    app.command("verify")(verify_cmd)

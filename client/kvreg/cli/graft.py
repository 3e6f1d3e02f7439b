"""``kvreg graft`` and ``kvreg verify``: put a stored state back, and check artifacts.

``graft`` opens the artifact (signature against the trust policy), reads its
tokens, loads the model under the artifact's recorded config (options override
it, which the engine then refuses by fingerprint), grafts, decodes, and with
``--check`` compares every decode step with a fresh computation (exit 3 unless
byte-exact).

With ``--receipt REMOTE`` (or ``receipts.always`` in ``config.json``) a signed
graft receipt goes to that registry afterwards (``kvreg.remote.receipts``): the
artifact, this host's fingerprints, the witness and check results, the time. The
graft's result is printed whatever happens to the receipt; a receipt that should
have been sent and was not makes the command fail (exit 1, or the error's own
status), except that ``receipts.always`` quietly skips artifacts the remote does
not have (their namespace or envelope is unknown there). A failed witness probe is
reported too (``witness: fail``) before the graft's own error.

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

from kvreg import console as output
from kvreg.app.loader import load_engine
from kvreg.cli import common
from kvreg.cli.engine_options import (
    AttnOpt,
    DeviceOpt,
    DtypeOpt,
    ProfileOpt,
    ThreadsOpt,
    bundle,
)
from kvreg.console import JsonOpt
from kvreg.core.digest import Digest
from kvreg.core.errors import (
    DigestMismatchError,
    IntegrityError,
    KvregError,
    ManifestUnknownError,
    NamespaceNotFoundError,
    NotByteExactError,
    ObjectNotFoundError,
    UsageError,
    WitnessMismatchError,
)
from kvreg.store import paging
from kvreg.store.artifacts import Artifact, read_tokens

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
    receipt: Annotated[
        str | None,
        typer.Option(
            "--receipt",
            metavar="REMOTE",
            help="Send a signed graft receipt to REMOTE afterwards (default: config.json receipts.always).",
        ),
    ] = None,
    no_receipt: Annotated[
        bool, typer.Option("--no-receipt", help="Send no receipt, whatever config.json says.")
    ] = False,
    receipt_key: Annotated[
        str, typer.Option("--receipt-key", metavar="NAME", help="The signing key for the receipt.")
    ] = common.DEFAULT_KEY_NAME,
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
    if receipt is not None and no_receipt:
        raise UsageError("give --receipt or --no-receipt, not both")
    if receipt is not None and shift_after_file is not None:
        raise UsageError("a shifted graft is approximate: it sends no receipt (drop --receipt)")
    prompt_text = common.read_text_file(prompt_file, what="prompt file") if prompt_file else None
    append_text = common.read_text_file(append_file, what="append file") if append_file else None
    home = common.home(ctx)
    artifact = common.open_verified(home, ref)
    manifest = artifact.manifest
    sender = (
        None
        if no_receipt or shift_after_file is not None
        else _receipt_sender(home, artifact, receipt, receipt_key)
    )
    tokens = read_tokens(home, manifest)
    fields = bundle(dtype, threads, attn, profile, device).over_recorded(manifest.config_fields)
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
    try:
        with out.status(f"grafting {artifact.digest.short()}"):
            outcome = graft(
                lm, home, manifest, tokens, prompt, blocks=blocks, verify=not trust_store, probe=not no_probe
            )
    except WitnessMismatchError:
        if sender is not None:
            sent = sender.send(out, lm, witness="fail", check=None, graft=None)
            if not sent.get("sent") and "error" in sent:
                out.warn(f"the receipt of the failed witness probe was not sent: {sent['error']['message']}")
        raise
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
    if sender is not None:
        data["receipt"] = sender.send(
            out,
            lm,
            witness="skipped" if outcome.probe is None else "pass",
            check=comparison,
            graft={
                "graft_tokens": plan.graft_tokens,
                "prompt_tokens": len(plan.prompt),
                "decoded_tokens": len(decoded.tokens),
                "whole": plan.whole,
            },
        )
        if error is None and sender.failure is not None:
            error = sender.failure

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
        sent = data.get("receipt")
        if sent is not None:
            if sent.get("sent"):
                console.print(
                    f"receipt {sent['receipt_digest']} sent to {escape(sent['remote'])} "
                    f"(log entry {sent.get('log_index')})"
                )
            elif sent.get("skipped"):
                console.print(f"no receipt sent to {escape(sent['remote'])}: {escape(sent['skipped'])}")
            else:
                console.print(f"[red]receipt NOT sent[/red] to {escape(sent['remote'])}")

    out.result(data, render, error=error)


# --- receipts --------------------------------------------------------------------------


class _ReceiptSender:
    """Sends the graft's receipt to one remote; remembers a failure for the command's exit."""

    def __init__(
        self, home: Any, artifact: Artifact, remote: str, namespace: str, key: Any, *, explicit: bool
    ) -> None:
        self.home = home
        self.artifact = artifact
        self.remote = remote
        self.namespace = namespace
        self.key = key
        self.explicit = explicit
        self.failure: KvregError | None = None

    def send(
        self,
        out: output.Output,
        lm: Any,
        *,
        witness: str,
        check: dict[str, Any] | None,
        graft: dict[str, Any] | None,
    ) -> dict[str, Any]:
        from kvreg.remote.config import connect
        from kvreg.remote.receipts import build_receipt, host_fields, send_receipt

        result: dict[str, Any] = {"remote": self.remote, "namespace": self.namespace, "sent": False}
        try:
            receipt = build_receipt(
                namespace=self.namespace,
                ref=self.artifact.ref.name if self.artifact.ref is not None else None,
                digest=str(self.artifact.digest),
                host=host_fields(
                    config_fingerprint=str(lm.config.fingerprint),
                    model_fingerprint=str(lm.model_fp),
                    tokenizer_fingerprint=str(lm.tokenizer_fp),
                    config_fields=lm.config.fields,
                ),
                witness=witness,
                check=check,
                graft=graft,
                key=self.key,
            )
            with (
                out.status(f"sending the graft receipt to {self.remote}"),
                connect(self.home, self.remote) as client,
            ):
                sent = send_receipt(client, receipt, self.key)
        except (NamespaceNotFoundError, ManifestUnknownError) as e:
            if not self.explicit:
                result["skipped"] = f"{self.remote} does not have this artifact ({e.code})"
                return result
            self._fail(result, e)
            return result
        except KvregError as e:
            self._fail(result, e)
            return result
        result.update(sent=True, **sent.to_dict())
        return result

    def _fail(self, result: dict[str, Any], e: KvregError) -> None:
        result["error"] = e.to_dict()
        self.failure = type(e)(
            f"the graft succeeded, but its receipt was not sent to {self.remote}: {e.message}",
            hint=e.hint or f"send it again later: kvreg graft ... --receipt {self.remote}",
            **e.details,
        )


def _receipt_sender(
    home: Any, artifact: Artifact, remote: str | None, key_name: str
) -> _ReceiptSender | None:
    """Who gets the receipt (``--receipt``, else ``receipts.always``), checked before the model loads."""
    from kvreg.remote.config import RemoteConfig
    from kvreg.remote.receipts import configured_remote
    from kvreg.store.artifacts import ANY_NAMESPACE, namespace_for

    explicit = remote is not None
    name = remote if explicit else configured_remote(home)
    if name is None:
        return None
    RemoteConfig(home).get(name)  # NotFoundError with the command that adds it
    namespace = namespace_for(home, artifact.target)
    if namespace == ANY_NAMESPACE:
        if explicit:
            raise UsageError(
                "a receipt names the artifact's namespace: graft it by its ref NS/NAME",
                hint="or drop --receipt",
            )
        return None
    key = common.load_signing_key(home, key_name)
    return _ReceiptSender(home, artifact, name, namespace, key, explicit=explicit)


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
    paging.touch(home, [d for d in manifest.object_digests() if str(d) not in objects["missing"]])
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
        fields = bundle(dtype, threads, attn, profile, device).over_recorded(manifest.config_fields)
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
        if objects["missing"] and not objects["corrupt"]:  # absent, not damaged: say how to get it
            name = str(artifact.ref) if artifact.ref else None
            error = paging.missing_object_error(
                home, Digest(objects["missing"][0]), f"object {objects['missing'][0]}", ref=name
            )
            error.message = "verification failed: " + "; ".join(problems) + "; " + error.message
        elif objects["corrupt"] or objects["missing"]:
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

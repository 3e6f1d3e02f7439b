from __future__ import annotations

import os
import stat

import pytest

from kvreg.core.digest import Digest
from kvreg.core.errors import ObjectNotFoundError

M1 = Digest.of_bytes(b"manifest 1")
M2 = Digest.of_bytes(b"manifest 2")


def test_put_get_layout(home):
    home.envelopes.put(M1, b'{"payload":"..."}')
    assert home.envelopes.get(M1) == b'{"payload":"..."}'
    p = home.envelopes.path(M1)
    assert p == home.envelopes_dir / M1.hex[:2] / f"{M1.hex}.json"
    assert stat.S_IMODE(p.stat().st_mode) == 0o444
    assert home.envelopes.has(M1) and not home.envelopes.has(M2)
    assert os.listdir(home.tmp_dir) == []


def test_missing_envelope_is_object_not_found(home):
    with pytest.raises(ObjectNotFoundError, match="no envelope for manifest"):
        home.envelopes.get(M1)
    with pytest.raises(ObjectNotFoundError):
        home.envelopes.remove(M1)


def test_replace_and_refresh(home):
    home.envelopes.put(M1, b"a")
    p = home.envelopes.path(M1)
    os.utime(p, (1000, 1000))
    home.envelopes.put(M1, b"a")
    assert p.stat().st_mtime > 1000
    home.envelopes.put(M1, b"b")
    assert home.envelopes.get(M1) == b"b"


def test_iter_and_remove(home):
    home.envelopes.put(M2, b"2")
    home.envelopes.put(M1, b"1")
    shard = home.envelopes_dir / M1.hex[:2]
    (shard / "junk.json").write_bytes(b"")
    (shard / f"{M1.hex}.json.incomplete").write_bytes(b"")
    wrong_shard = home.envelopes_dir / ("00" if M1.hex[:2] != "00" else "11")
    wrong_shard.mkdir(exist_ok=True)
    (wrong_shard / f"{M1.hex}.json").write_bytes(b"")  # misplaced: not listed
    assert sorted(home.envelopes.iter_manifest_digests()) == sorted([M1, M2])
    assert home.envelopes.remove(M1) == 1
    assert list(home.envelopes.iter_manifest_digests()) == [M2]

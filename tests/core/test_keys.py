"""Ed25519 keys: files, permissions, text forms, verification."""

from __future__ import annotations

import base64
import hashlib
import stat
from pathlib import Path

import pytest

from kvreg.core.errors import KeyFileError, SignatureError
from kvreg.core.keys import PublicKey, SigningKey
from kvreg.fileio.keyfiles import load_signing_key, save_signing_key

# RFC 8032 §7.1, test 1.
RFC8032_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC8032_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
RFC8032_SIG_EMPTY = bytes.fromhex(
    "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
)


def test_rfc8032_vector() -> None:
    key = SigningKey.from_seed(RFC8032_SEED)
    assert key.public_key.raw == RFC8032_PUBLIC
    assert key.sign(b"") == RFC8032_SIG_EMPTY
    key.public_key.verify(RFC8032_SIG_EMPTY, b"")


def test_keyid_and_text_form() -> None:
    pub = PublicKey(RFC8032_PUBLIC)
    assert pub.keyid == "sha256:" + hashlib.sha256(RFC8032_PUBLIC).hexdigest()
    text = pub.to_text()
    assert text == "ed25519:" + base64.b64encode(RFC8032_PUBLIC).decode()
    assert PublicKey.from_text(text) == pub
    assert PublicKey.from_pem(pub.to_pem()) == pub
    assert pub.to_pem().startswith(b"-----BEGIN PUBLIC KEY-----")
    assert text in repr(pub)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "ed25519:",
        "rsa:" + base64.b64encode(RFC8032_PUBLIC).decode(),
        "ed25519:" + base64.b64encode(RFC8032_PUBLIC[:31]).decode(),
        "ed25519:" + base64.b64encode(RFC8032_PUBLIC).decode().rstrip("="),
        "ed25519:" + base64.urlsafe_b64encode(b"\xfb" * 32).decode(),
        "ed25519: " + base64.b64encode(RFC8032_PUBLIC).decode(),
        "ed25519:" + base64.b64encode(RFC8032_PUBLIC).decode() + "\n",
    ],
)
def test_bad_text_forms(text: str) -> None:
    with pytest.raises(KeyFileError):
        PublicKey.from_text(text)


def test_verify_raises() -> None:
    key = SigningKey.generate()
    sig = key.sign(b"data")
    key.public_key.verify(sig, b"data")
    with pytest.raises(SignatureError, match=key.public_key.keyid):
        key.public_key.verify(sig, b"other")
    bad = bytearray(sig)
    bad[0] ^= 1
    with pytest.raises(SignatureError):
        key.public_key.verify(bytes(bad), b"data")
    with pytest.raises(SignatureError):
        key.public_key.verify(sig[:-1], b"data")
    with pytest.raises(SignatureError):
        SigningKey.generate().public_key.verify(sig, b"data")


def test_save_and_load(tmp_path: Path) -> None:
    key = SigningKey.generate()
    path = tmp_path / "id.pem"
    save_signing_key(key, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    loaded = load_signing_key(path)
    assert loaded.public_key == key.public_key
    assert [p.name for p in tmp_path.iterdir()] == ["id.pem"]  # no temp file left behind
    assert key.public_key.keyid in repr(key)
    assert b"PRIVATE" not in repr(key).encode()


def test_save_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "id.pem"
    first = SigningKey.generate()
    save_signing_key(first, path)
    with pytest.raises(KeyFileError, match="already exists"):
        save_signing_key(SigningKey.generate(), path)
    assert load_signing_key(path).public_key == first.public_key
    second = SigningKey.generate()
    save_signing_key(second, path, overwrite=True)
    assert load_signing_key(path).public_key == second.public_key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660, 0o602])
def test_load_refuses_loose_permissions(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "id.pem"
    save_signing_key(SigningKey.generate(), path)
    path.chmod(mode)
    with pytest.raises(KeyFileError) as info:
        load_signing_key(path)
    assert info.value.hint == f"chmod 600 {path}"
    assert "group or others" in info.value.message


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="does not exist"):
        load_signing_key(tmp_path / "missing.pem")
    junk = tmp_path / "junk.pem"
    junk.write_bytes(b"not a key")
    junk.chmod(0o600)
    with pytest.raises(KeyFileError, match=r"junk\.pem"):
        load_signing_key(junk)
    pub = tmp_path / "pub.pem"
    pub.write_bytes(SigningKey.generate().public_key.to_pem())
    pub.chmod(0o600)
    with pytest.raises(KeyFileError):
        load_signing_key(pub)
    with pytest.raises(KeyFileError):
        load_signing_key(tmp_path)  # a directory


def test_non_ed25519_keys_are_refused() -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ec_key = ec.generate_private_key(ec.SECP256R1())
    pem = ec_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(KeyFileError, match="not Ed25519"):
        SigningKey.from_pem(pem)
    pub_pem = ec_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(KeyFileError, match="not Ed25519"):
        PublicKey.from_pem(pub_pem)
    with pytest.raises(KeyFileError):
        PublicKey(b"\x00" * 31)

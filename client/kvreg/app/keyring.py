"""The store's signing keys by name (``keys/NAME.key``, ``keys/NAME.pub``), and opening artifacts.

Key names are checked before any path is built from them; loading raises
``KeyFileError`` with the command that creates the key. :func:`open_verified`
opens an artifact through the trust policy, naming the signer when it is one of
this store's own (untrusted) keys. Nothing here prints.
"""

from __future__ import annotations

import re
from pathlib import Path

from kvreg.core.errors import KeyFileError, UsageError
from kvreg.core.keys import PublicKey, SigningKey
from kvreg.fileio import keyfiles
from kvreg.store.artifacts import Artifact, open_artifact
from kvreg.store.home import Home

KEY_SUFFIX = ".key"
PUB_SUFFIX = ".pub"
DEFAULT_KEY_NAME = "default"
_KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)


def validate_key_name(name: str) -> str:
    if _KEY_NAME.fullmatch(name) is None or ".." in name:
        raise UsageError(
            f"invalid key name {name!r}",
            hint="1-64 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit, no '..'",
        )
    return name


def key_path(h: Home, name: str) -> Path:
    return h.keys_dir / f"{validate_key_name(name)}{KEY_SUFFIX}"


def pub_path(h: Home, name: str) -> Path:
    return h.keys_dir / f"{validate_key_name(name)}{PUB_SUFFIX}"


def load_signing_key(h: Home, name: str) -> SigningKey:
    path = key_path(h, name)
    if not path.exists():
        raise KeyFileError(
            f"no signing key {name!r} in {h.keys_dir}",
            hint="create one with: kvreg keys generate"
            + ("" if name == DEFAULT_KEY_NAME else f" --name {name}"),
        )
    return keyfiles.load_signing_key(path)


def local_public_keys(h: Home) -> dict[str, PublicKey]:
    """Name → public key of every key in ``keys/`` (from ``.pub``, else from ``.key``)."""
    out: dict[str, PublicKey] = {}
    try:
        files = sorted(h.keys_dir.iterdir())
    except FileNotFoundError:
        return out
    names = sorted({f.stem for f in files if f.suffix in (KEY_SUFFIX, PUB_SUFFIX)})
    for name in names:
        if _KEY_NAME.fullmatch(name) is None:
            continue
        pub = h.keys_dir / f"{name}{PUB_SUFFIX}"
        try:
            if pub.is_file():
                out[name] = PublicKey.from_text(pub.read_text("ascii").strip())
            else:
                out[name] = keyfiles.load_signing_key(h.keys_dir / f"{name}{KEY_SUFFIX}").public_key
        except (KeyFileError, OSError, UnicodeDecodeError):
            continue
    return out


# --- artifacts ------------------------------------------------------------------------


def open_verified(h: Home, target: str) -> Artifact:
    """``open_artifact``, naming the signer when one of this store's untrusted keys signed."""
    return open_artifact(h, target, known_keys=local_public_keys(h).values())

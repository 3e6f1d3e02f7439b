"""Files of key material: private signing keys and the trust policy.

A signing key is saved as unencrypted PEM (PKCS#8) with mode 0600, atomically, and
never over an existing file unless asked; a private key file that group or others
can read is refused on load with the ``chmod`` that fixes it. The trust policy is
one canonical JSON file (mode 0644); a missing file is an empty policy.

The key and policy *values* (parsing, signing, which key is trusted for what) live
in ``kvreg.core.keys`` and ``kvreg.core.trust``; this module only moves their bytes
to and from disk.
"""

from __future__ import annotations

import os
import shlex
import stat
import sys
from pathlib import Path

from kvreg.core.errors import ConfigError, KeyFileError, StoreError, UsageError
from kvreg.core.keys import PublicKey, SigningKey
from kvreg.core.trust import TrustPolicy
from kvreg.fileio.atomicfile import atomic_write_bytes

__all__ = [
    "load_signing_key",
    "load_trust_policy",
    "read_public_key",
    "save_signing_key",
    "save_trust_policy",
]

_MAX_KEY_FILE_BYTES = 64 * 1024


def save_signing_key(key: SigningKey, path: str | Path, *, overwrite: bool = False) -> None:
    """Write ``key`` as PEM PKCS#8, mode 0600, atomically.

    Refuses to replace an existing file unless ``overwrite`` (a lost private key
    cannot be recovered).
    """
    target = Path(path)
    try:
        atomic_write_bytes(target, key.to_pem(), mode=0o600, exclusive=not overwrite)
    except FileExistsError as e:
        raise KeyFileError(
            f"key file {target} already exists; not overwriting it",
            hint="choose another path, or move the old key away first",
        ) from e
    except StoreError as e:
        raise KeyFileError(f"cannot write key file {target}: {e.message}") from e


def load_signing_key(path: str | Path) -> SigningKey:
    """Read a private key file; refuse it if group or others may read or write it."""
    source = Path(path)
    try:
        with source.open("rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise KeyFileError(f"key file {source} is not a regular file")
            if sys.platform != "win32" and st.st_mode & 0o077:
                raise KeyFileError(
                    f"key file {source} is accessible by group or others "
                    f"(mode {stat.S_IMODE(st.st_mode):04o})",
                    hint=f"chmod 600 {shlex.quote(str(source))}",
                )
            data = f.read(_MAX_KEY_FILE_BYTES + 1)
    except FileNotFoundError as e:
        raise KeyFileError(
            f"key file {source} does not exist", hint="create one with `kvreg keys generate`"
        ) from e
    except OSError as e:
        raise KeyFileError(f"cannot read key file {source}: {e.strerror or e}") from e
    if len(data) > _MAX_KEY_FILE_BYTES:
        raise KeyFileError(f"key file {source} is too large to be a key")
    try:
        return SigningKey.from_pem(data)
    except KeyFileError as e:
        raise KeyFileError(f"key file {source}: {e.message}") from e


def load_trust_policy(path: str | Path) -> TrustPolicy:
    """Read a policy file; a missing file is an empty policy."""
    source = Path(path)
    try:
        data = source.read_bytes()
    except FileNotFoundError:
        return TrustPolicy()
    except OSError as e:
        raise ConfigError(f"cannot read trust policy {source}: {e.strerror or e}") from e
    return TrustPolicy.from_json_bytes(data, source=f"trust policy {source}")


def save_trust_policy(policy: TrustPolicy, path: str | Path) -> None:
    """Write the policy atomically (mode 0644)."""
    target = Path(path)
    try:
        atomic_write_bytes(target, policy.to_json_bytes(), mode=0o644)
    except StoreError as e:
        raise ConfigError(f"cannot write trust policy {target}: {e.message}") from e


def read_public_key(value: str) -> PublicKey:
    """``ed25519:...`` text, or the path of a ``.pub`` (text) or PEM file."""
    if value.startswith("ed25519:"):
        return PublicKey.from_text(value.strip())
    path = Path(value)
    if not path.is_file():
        raise UsageError(
            f"{value!r} is neither an 'ed25519:...' public key nor a key file",
            hint="get the text form with: kvreg keys export",
        )
    try:
        data = path.read_bytes()
    except OSError as e:
        raise KeyFileError(f"cannot read {path}: {e.strerror or e}") from e
    if data.lstrip().startswith(b"-----BEGIN"):
        return PublicKey.from_pem(data)
    try:
        return PublicKey.from_text(data.decode("ascii").strip())
    except UnicodeDecodeError as e:
        raise KeyFileError(f"{path} is not a public key file") from e

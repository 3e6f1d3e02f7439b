"""Small helpers the command modules share: the store, input files, key files.

Everything here raises ``KvregError`` subclasses with a hint; nothing prints
(``kvreg.console`` does).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import typer

from kvreg.console import CliState
from kvreg.core.errors import KeyFileError, UsageError
from kvreg.core.keys import PublicKey, SigningKey
from kvreg.fileio import keyfiles
from kvreg.store.artifacts import Artifact, open_artifact
from kvreg.store.home import Home

KEY_SUFFIX = ".key"
PUB_SUFFIX = ".pub"
DEFAULT_KEY_NAME = "default"
_KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)
_MAX_TEXT_BYTES = 256 * 1024 * 1024


def home(ctx: typer.Context) -> Home:
    """The store of this invocation: ``--home``, else ``$KVREG_HOME``, else ``~/.kvreg``."""
    state = ctx.find_object(CliState)
    return Home(state.home if state is not None else None)


def read_text_file(path: str | Path, *, what: str) -> str:
    """A text file's exact content, decoded strictly as UTF-8."""
    source = Path(path)
    try:
        if not source.is_file():
            raise UsageError(f"{what} {source} does not exist or is not a file")
        if source.stat().st_size > _MAX_TEXT_BYTES:
            raise UsageError(f"{what} {source} is larger than {_MAX_TEXT_BYTES // (1024 * 1024)} MiB")
        data = source.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read {what} {source}: {e.strerror or e}") from e
    try:
        return data.decode("utf-8", errors="strict")
    except UnicodeDecodeError as e:
        raise UsageError(
            f"{what} {source} is not valid UTF-8 (byte {e.start}: {e.reason})",
            hint="kvreg reads text files as UTF-8; convert it, e.g. with iconv -t UTF-8",
        ) from e


def parse_json_object(text: str, *, option: str) -> dict[str, Any]:
    """A JSON object given on the command line, or ``@FILE`` for one in a file."""
    source = option
    if text.startswith("@"):
        source = f"{option} file {text[1:]}"
        text = read_text_file(text[1:], what=f"{option} file")
    try:
        value = json.loads(text)
    except ValueError as e:
        raise UsageError(
            f"{source} is not valid JSON: {e}", hint='e.g. --evidence \'{"answer": "738"}\''
        ) from e
    if not isinstance(value, dict):
        raise UsageError(f"{source} must be a JSON object, not {type(value).__name__}")
    return value


# --- key files ----------------------------------------------------------------------


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

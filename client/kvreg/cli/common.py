"""Small helpers the command modules share: the store of this invocation, input files.

Everything here raises ``KvregError`` subclasses with a hint; nothing prints
(``kvreg.console`` does).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from kvreg.app.home import StoreHome, open_home
from kvreg.console import CliState
from kvreg.core.errors import UsageError

_MAX_TEXT_BYTES = 256 * 1024 * 1024

RefArg = Annotated[str, typer.Argument(metavar="REF", help="NS/NAME or a manifest digest sha256:<hex>.")]


def home(ctx: typer.Context) -> StoreHome:
    """The store of this invocation: ``--home``, else ``$KVREG_HOME``, else ``~/.kvreg``."""
    state = ctx.find_object(CliState)
    return open_home(state.home if state is not None else None)


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

"""Read a user's text file: bounded in size, decoded strictly as UTF-8, errors that name the file.

``kvreg`` reads prompts, texts and chat messages files this one way. This module does not
parse what it reads (``kvreg.app.prompts`` parses messages files).
"""

from __future__ import annotations

from pathlib import Path

from kvreg.core.errors import UsageError


def read_utf8_text(source: Path, what: str, max_bytes: int) -> str:
    """The exact content of ``source``; ``what`` names it in errors (e.g. "prompt file q.txt")."""
    try:
        if not source.is_file():
            raise UsageError(f"{what} does not exist or is not a file")
        if source.stat().st_size > max_bytes:
            raise UsageError(f"{what} is larger than {max_bytes // (1024 * 1024)} MiB")
        data = source.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read {what}: {e.strerror or e}") from e
    try:
        return data.decode("utf-8", errors="strict")
    except UnicodeDecodeError as e:
        raise UsageError(
            f"{what} is not valid UTF-8 (byte {e.start}: {e.reason})",
            hint="kvreg reads text files as UTF-8; convert it, e.g. with iconv -t UTF-8",
        ) from e

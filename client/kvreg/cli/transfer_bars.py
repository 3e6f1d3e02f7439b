"""Progress bars of a push or pull on stderr: bytes, rate, time left and objects.

:class:`TransferBars` implements the ``Progress`` protocol of ``kvreg.remote.progress``
with rich; :func:`transfer_bars` gives none with ``--json`` or when stderr is not a
terminal. Nothing here transfers anything.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.progress import Progress as RichProgress

from kvreg import console as output

__all__ = ["TransferBars", "human_size", "transfer_bars"]


def human_size(n: int) -> str:
    """``n`` bytes in binary units: ``512 B``, ``1.5 MiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


class TransferBars:
    """A transfer's ``Progress`` (kvreg.remote.progress's protocol) on stderr: bytes, rate, ETA, objects."""

    def __init__(self, console: Console, label: str) -> None:
        self._label = label
        self._bars = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(binary_units=True),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[objects]}"),
            console=console,
            transient=False,
        )
        self._task: Any = None
        self._lock = threading.Lock()
        self._done = 0
        self._total = 0

    def start(self, total_bytes: int, total_objects: int) -> None:
        if total_objects == 0:
            return
        self._total = total_objects
        self._bars.start()
        self._task = self._bars.add_task(self._label, total=total_bytes, objects=f"0/{total_objects} objects")

    def advance(self, n_bytes: int) -> None:
        if self._task is not None:
            self._bars.advance(self._task, n_bytes)

    def object_done(self) -> None:
        if self._task is None:
            return
        with self._lock:
            self._done += 1
            text = f"{self._done}/{self._total} objects"
        self._bars.update(self._task, objects=text)

    def stop(self) -> None:
        if self._task is not None:
            self._bars.stop()


@contextmanager
def transfer_bars(out: output.Output, label: str) -> Iterator[TransferBars | None]:
    """Progress bars on stderr for a transfer, or None with --json or when stderr is not a terminal."""
    if out.json or not out.err.is_terminal:
        yield None
        return
    bars = TransferBars(out.err, label)
    try:
        yield bars
    finally:
        bars.stop()

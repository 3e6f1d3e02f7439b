"""What a use case reports while it runs: a status line around each long step, warnings.

``Feedback`` is the small protocol the CLI's ``kvreg.console.Output`` implements
(a spinner on a terminal, a log line otherwise); ``Silent`` is the one a library
caller gets by default. Results never go through here: a use case returns them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Protocol

log = logging.getLogger(__name__)


class Feedback(Protocol):
    """Status lines and warnings from a running use case."""

    @property
    def verbose(self) -> int:
        """How much library output the user asked for (0: none; 2 and more: everything)."""
        ...

    def status(self, message: str) -> AbstractContextManager[None]: ...

    def warn(self, message: str) -> None: ...


class Silent:
    """Feedback that only logs."""

    verbose = 0

    @contextlib.contextmanager
    def status(self, message: str) -> Iterator[None]:
        log.debug("%s ...", message)
        yield

    def warn(self, message: str) -> None:
        log.warning("%s", message)

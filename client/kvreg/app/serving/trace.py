"""One HTTP request's record, from its headers to the end of its answer.

The front door (``.gate``) opens a :class:`Trace` for every request and makes it the
:func:`current` one for the code that answers it (a context variable: the route, the stream's
generator and the helpers that wait for the model see the same object). The answering code
writes what happened (the model's result, or that the client left and at which stage); the
gate reads it when the answer ends, releases the request's place in the queue and gives the
metrics their observations (time to first token and end to end, from ``started``).
"""

from __future__ import annotations

import asyncio
import contextvars
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from kvreg.app.serving.admission import Ticket
    from kvreg.app.serving.host import JobResult

Stage = Literal["queued", "running"]


@dataclass
class Trace:
    route: str  # the route's path template (a bounded set: a metrics label)
    started: float  # time.perf_counter() when the headers arrived
    gone: asyncio.Event = field(default_factory=asyncio.Event)  # set when the client disconnects
    ticket: Ticket | None = None  # its place in the queue, for the routes that use the model
    result: JobResult | None = None  # the model's answer, once there is one
    abandoned: Stage | None = None  # the client left while its request waited, or while it ran

    def leave(self, stage: Stage) -> None:
        """The client left: give its place back at once, and say at which stage it left."""
        if self.abandoned is None:
            self.abandoned = stage
        if self.ticket is not None:
            self.ticket.release()


_CURRENT: contextvars.ContextVar[Trace | None] = contextvars.ContextVar("kvreg_serve_trace", default=None)


def current() -> Trace | None:
    """The trace of the request being answered (None outside a request, e.g. a direct call)."""
    return _CURRENT.get()


def enter(trace: Trace) -> contextvars.Token[Trace | None]:
    return _CURRENT.set(trace)


def leave_context(token: contextvars.Token[Trace | None]) -> None:
    _CURRENT.reset(token)

"""How the probe's commands end on a signal.

``run`` and ``sink`` are services: SIGTERM and SIGINT set an event the service waits
on, and it stops cleanly within its grace period. ``once`` is a command with a
report: a signal raises :class:`Interrupted` wherever it runs, so every context
manager on the way out (the embedded broker, the Spark session) stops what it started,
and the command exits 128 + the signal's number.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator
from types import FrameType


def stop_on_signals(stop: asyncio.Event | None) -> asyncio.Event:
    """The event that stops the service; SIGTERM and SIGINT set it."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    return stop


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived. A BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` on the way swallows it before the embedded broker is stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM and SIGINT raise :class:`Interrupted` inside the block (the previous
    handlers are back afterwards): whatever runs there, its context managers and
    ``finally`` blocks run, the embedded broker's and the Spark session's included."""
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

"""How the probe's commands end on a signal.

``run`` and ``sink`` are services: SIGTERM and SIGINT set an event the service waits
on, and it stops cleanly within its grace period. ``once`` is a command with a
report: a signal raises :class:`Interrupted` wherever it runs (in its event loop, by
cancelling the main task: :func:`raising_on_signals`), so every context manager on the
way out (the embedded broker, the Spark session) stops what it started, and the command
exits 128 + the signal's number.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Iterator
from types import FrameType
from typing import TypeVar

T = TypeVar("T")
_STOPPING = (signal.SIGTERM, signal.SIGINT)


def stop_on_signals(stop: asyncio.Event | None) -> asyncio.Event:
    """The event that stops the service; SIGTERM and SIGINT set it."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in _STOPPING:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    return stop


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived. A BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` on the way swallows it before the embedded broker is stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# One list per open interrupts_deferred() block, innermost last: the signals it holds.
_deferred: list[list[int]] = []


def _interrupt(signum: int, frame: FrameType | None) -> None:
    if _deferred:
        _deferred[-1].append(signum)
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """A signal that :func:`interruptible` turns into :class:`Interrupted` is raised at
    the end of this block, not in its middle: for a step that must not be cut in half.
    Starting a child is one: a signal between the fork and ``Popen`` returning would
    leave a child that no ``stop()`` knows of, an orphaned broker."""
    held: list[int] = []
    _deferred.append(held)
    try:
        yield
    finally:
        _deferred.pop()
    if held:
        raise Interrupted(held[0])


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM and SIGINT raise :class:`Interrupted` inside the block (the previous
    handlers are back afterwards): whatever runs there, its context managers and
    ``finally`` blocks run, the embedded broker's and the Spark session's included."""
    previous = {sig: signal.signal(sig, _interrupt) for sig in _STOPPING}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


async def raising_on_signals(main: Awaitable[T]) -> T:
    """``await main``; SIGTERM or SIGINT cancel it and raise :class:`Interrupted` here.

    The handler :func:`interruptible` installs is not enough inside an event loop:
    uvloop runs Python signal handlers from whichever callback runs next, and a loop
    catches what a callback raises (KeyboardInterrupt and SystemExit aside) and only
    logs it, so the interrupt vanished and ``once`` ran on (or left its broker behind).
    The loop's own signal handling hands the signal to this task instead. The handlers
    in place before are back afterwards (the loop would leave the defaults)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    received: list[int] = []

    def interrupt(signum: int) -> None:
        if not received and task is not None:
            task.cancel()
        received.append(signum)

    previous = {sig: signal.getsignal(sig) for sig in _STOPPING}
    for sig in _STOPPING:
        loop.add_signal_handler(sig, interrupt, sig)
    try:
        return await main
    except asyncio.CancelledError:
        if received:
            raise Interrupted(received[0]) from None
        raise
    finally:
        for sig, handler in previous.items():
            loop.remove_signal_handler(sig)
            if handler is not None:  # None: not installed from Python, nothing to restore
                signal.signal(sig, handler)

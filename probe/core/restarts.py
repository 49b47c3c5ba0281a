"""When to restart a stage that failed, and when to give it up: pure.

The strategy is Flink's exponential delay with a failure-rate cap. Each failure waits
``initial_delay * multiplier ** attempt`` (at most ``max_delay``, spread by
``± jitter``) before the next start, so a transient failure costs a second and a
persistent one does not hammer a broker or a checkpoint store. A run that lasted
``reset_after`` without failing was healthy: the next failure starts over at
``initial_delay``. The ``max_failures``-th failure within ``failure_window`` gives the
stage up, as restarting it is no longer curing anything and a page should say so.

Times are monotonic seconds; the caller owns the clock and the random source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class RestartStrategy:
    initial_delay: float = 1.0
    multiplier: float = 1.5
    max_delay: float = 60.0
    jitter: float = 0.1
    reset_after: float = 3600.0
    max_failures: int = 10
    failure_window: float = 3600.0


@dataclass(frozen=True)
class RestartState:
    """What the strategy remembers: the failures inside the window, and the attempt
    the delay grows with (0 after a reset)."""

    failures: tuple[float, ...] = ()
    attempt: int = 0


@dataclass(frozen=True)
class Decision:
    """After a failure: restart after ``delay`` seconds, or give up (``delay`` None)."""

    state: RestartState
    delay: float | None

    @property
    def give_up(self) -> bool:
        return self.delay is None


def after_failure(
    strategy: RestartStrategy,
    state: RestartState,
    *,
    failed_at: float,
    ran_for: float,
    random: Callable[[], float],
) -> Decision:
    """The decision for a failure at ``failed_at`` of a run that lasted ``ran_for``.

    ``random`` returns a float in [0, 1) (``random.random``): the jitter, so that
    probes restarted by one broker outage do not all come back in the same second.

    >>> s = RestartStrategy(jitter=0.0)
    >>> first = after_failure(s, RestartState(), failed_at=10.0, ran_for=5.0, random=lambda: 0.5)
    >>> first.delay
    1.0
    >>> after_failure(s, first.state, failed_at=12.0, ran_for=1.0, random=lambda: 0.5).delay
    1.5
    """
    failures = tuple(t for t in state.failures if t > failed_at - strategy.failure_window)
    failures += (failed_at,)
    if len(failures) >= strategy.max_failures:
        return Decision(RestartState(failures, state.attempt), None)
    attempt = 0 if ran_for >= strategy.reset_after else state.attempt
    base = min(strategy.max_delay, strategy.initial_delay * strategy.multiplier**attempt)
    spread = 1.0 + strategy.jitter * (2.0 * random() - 1.0)
    return Decision(replace(state, failures=failures, attempt=attempt + 1), base * spread)

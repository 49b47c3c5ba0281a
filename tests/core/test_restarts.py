"""The restart strategy of the sink query: delays, reset, failure-rate cap (pure)."""

from __future__ import annotations

import pytest

from probe.config import load
from probe.core.restarts import RestartState, RestartStrategy, after_failure

MIDDLE = 0.5  # random() at 0.5 puts the jitter at 0


def _run(strategy: RestartStrategy, failures: list[tuple[float, float]]) -> list[float | None]:
    """Delays after failures at (time, ran_for)."""
    state, delays = RestartState(), []
    for failed_at, ran_for in failures:
        decision = after_failure(
            strategy, state, failed_at=failed_at, ran_for=ran_for, random=lambda: MIDDLE
        )
        state = decision.state
        delays.append(decision.delay)
    return delays


def test_delays_grow_by_the_multiplier_up_to_the_maximum() -> None:
    strategy = RestartStrategy(
        initial_delay=1.0, multiplier=2.0, max_delay=10.0, max_failures=100, jitter=0.0
    )
    delays = _run(strategy, [(float(t), 1.0) for t in range(6)])
    assert delays == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_a_run_as_long_as_reset_after_starts_over_at_the_initial_delay() -> None:
    strategy = RestartStrategy(
        initial_delay=1.0, multiplier=2.0, reset_after=600.0, max_failures=100
    )
    delays = _run(strategy, [(0.0, 1.0), (10.0, 1.0), (20.0, 1.0), (900.0, 600.0), (905.0, 5.0)])
    assert delays == [1.0, 2.0, 4.0, 1.0, 2.0]


@pytest.mark.parametrize(
    ("times", "gives_up_at"),
    [
        # The 3rd failure within 60 s gives up.
        ([0.0, 10.0, 20.0], 2),
        # Spread wider than the window: never.
        ([0.0, 70.0, 140.0, 210.0, 280.0], None),
        # Two old ones leave the window, three new ones inside it.
        ([0.0, 30.0, 100.0, 120.0, 130.0], 4),
    ],
)
def test_the_failure_rate_cap_gives_up(times: list[float], gives_up_at: int | None) -> None:
    strategy = RestartStrategy(max_failures=3, failure_window=60.0)
    delays = _run(strategy, [(t, 1.0) for t in times])
    given_up = [i for i, delay in enumerate(delays) if delay is None]
    assert given_up[:1] == ([] if gives_up_at is None else [gives_up_at])


@pytest.mark.parametrize(("random", "expected"), [(0.0, 9.0), (0.5, 10.0), (0.999999, 11.0)])
def test_jitter_spreads_the_delay_both_ways(random: float, expected: float) -> None:
    strategy = RestartStrategy(initial_delay=10.0, jitter=0.1)
    decision = after_failure(
        strategy, RestartState(), failed_at=0, ran_for=0, random=lambda: random
    )
    assert decision.delay == pytest.approx(expected, abs=1e-4)


def test_the_defaults_are_flinks_exponential_delay_with_a_cap() -> None:
    strategy = RestartStrategy(**load().sink.restart.model_dump())
    assert strategy == RestartStrategy(
        initial_delay=1.0,
        multiplier=1.5,
        max_delay=60.0,
        jitter=0.1,
        reset_after=3600.0,
        max_failures=10,
        failure_window=3600.0,
    )
    config = load(overrides={"sink.restart.initial_delay": "5s", "sink.restart.max_failures": 3})
    assert RestartStrategy(**config.sink.restart.model_dump()).initial_delay == 5.0

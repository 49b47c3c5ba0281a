"""The fetch wait decided from read delays (probe.core.fetch_wait): pure."""

from __future__ import annotations

import doctest

import probe.core.fetch_wait
from probe.core.fetch_wait import LONG, SAMPLE, SHORT, FetchWait

# Read delays (ms) of one decision each, as measured on this project's VM at the short
# wait (30 partitions, a round a second; see the module doc).
APACHE_KAFKA_MS = [
    [0] * 11 + [1] * 6 + [2] * 13,
    [0] * 3 + [1] * 4 + [2] * 9 + [3] * 12 + [4] * 2,
    [0] * 22 + [1] * 4 + [2, 4, 6, 6],
]
EMBEDDED_MS = [
    [32] * 10 + [51] * 20,
    [1] * 10 + [20] * 19 + [21],
    [6] * 20 + [39] * 6 + [40] * 4,
    [10] * 10 + [30] * 20,
    [7] * 10 + [27] * 20,
]
# At the long wait the embedded broker held some fetches to the end.
EMBEDDED_AT_LONG_MS = [13] * 20 + [499] * 10


def decisions(wait: FetchWait, windows: list[list[int]]) -> list[float | None]:
    changes = []
    for window in windows:
        for delay_ms in window:
            changed = wait.read_after(delay_ms / 1e3)
        changes.append(changed)
    return changes


def test_doctests() -> None:
    assert doctest.testmod(probe.core.fetch_wait).failed == 0


def test_a_broker_that_answers_as_records_arrive_gets_the_long_wait_after_one_sample() -> None:
    wait = FetchWait(None)

    assert wait.seconds == SHORT
    assert decisions(wait, APACHE_KAFKA_MS[:1]) == [LONG]
    assert decisions(wait, APACHE_KAFKA_MS) == [None, None, None]
    assert wait.seconds == LONG


def test_a_broker_that_holds_fetches_keeps_the_short_wait() -> None:
    wait = FetchWait(None)

    assert decisions(wait, EMBEDDED_MS) == [None] * len(EMBEDDED_MS)
    assert wait.seconds == SHORT


def test_a_long_wait_that_reads_late_goes_back_and_is_tried_again_ever_more_rarely() -> None:
    wait = FetchWait(None)
    fast = [[0] * SAMPLE]

    assert decisions(wait, fast) == [LONG]
    assert decisions(wait, [EMBEDDED_AT_LONG_MS]) == [SHORT]
    # One failed try: two passing decisions in a row before the next; a slow one
    # between them starts the count over.
    assert decisions(wait, fast + EMBEDDED_MS[:1] + fast + fast) == [None, None, None, LONG]
    assert decisions(wait, [EMBEDDED_AT_LONG_MS]) == [SHORT]
    assert decisions(wait, fast * 4) == [None, None, None, LONG]


def test_a_slow_moment_at_the_long_wait_within_the_short_wait_changes_nothing() -> None:
    wait = FetchWait(None)
    decisions(wait, [[0] * SAMPLE])

    assert decisions(wait, [[80] * SAMPLE]) == [None]
    assert wait.seconds == LONG


def test_a_pinned_wait_never_changes() -> None:
    wait = FetchWait(0.02)

    assert decisions(wait, [[0] * SAMPLE] * 3) == [None] * 3
    assert wait.reset() is None
    assert (wait.seconds, wait.short, wait.adapts) == (0.02, 0.02, False)


def test_a_reset_goes_back_to_the_short_wait_and_forgets_the_samples() -> None:
    wait = FetchWait(None)
    decisions(wait, [[0] * SAMPLE])

    assert wait.reset() == SHORT
    assert wait.reset() is None
    assert wait.read_after(0.0) is None, "a new sample starts"

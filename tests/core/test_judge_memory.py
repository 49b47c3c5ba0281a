"""The judge's compact memory answers exactly as the dictionaries it replaced, and
stays a few kilobytes a stream however long the stream lives."""

from __future__ import annotations

import itertools
import json
import tracemalloc
from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from probe.core.canary import Canary
from probe.core.judge import READ_AT_KEPT, Judge, JudgePolicy, StreamKey
from probe.core.judge_memory import ArrivedRing, DecidedRuns

INCARNATIONS = (5, 9)
SEQS = st.integers(min_value=0, max_value=40)
IDENTS = st.tuples(st.sampled_from(INCARNATIONS), SEQS)
DECISIONS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), IDENTS, st.booleans()),
        st.tuples(st.just("drop"), st.integers(min_value=0, max_value=6), st.just(False)),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(DECISIONS)
def test_decided_runs_answer_as_a_dictionary_does(operations: list[tuple[object, ...]]) -> None:
    runs, reference = DecidedRuns(), dict[tuple[int, int], bool]()
    for kind, argument, lost in operations:
        if kind == "add":
            assert isinstance(argument, tuple)
            runs.add(argument, lost=bool(lost))
            reference[argument] = bool(lost)
        else:
            assert isinstance(argument, int)
            for ident in sorted(reference)[:argument]:
                del reference[ident]
            assert runs.drop_lowest(argument) == (min(reference) if reference else None)
        assert len(runs) == len(reference)
    assert list(runs.idents()) == sorted(reference)
    for incarnation in INCARNATIONS:
        for seq in range(-1, 42):
            assert runs.get((incarnation, seq)) == reference.get((incarnation, seq))
    rows = runs.runs()
    # Runs are maximal: two that touch differ in their flag.
    for left, right in itertools.pairwise(rows):
        assert left[0] != right[0] or left[2] != right[1] or left[3] != right[3]
    assert DecidedRuns.from_runs(json.loads(json.dumps(rows))).runs() == rows


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(IDENTS, st.integers(0, 2**64 - 1), st.integers(-1, 2**63 - 1)),
        max_size=40,
        unique_by=lambda arrival: arrival[0],
    ),
    st.one_of(st.none(), IDENTS),
)
def test_the_arrived_ring_answers_as_an_ordered_dictionary_does(
    arrivals: list[tuple[tuple[int, int], int, int]], lowest: tuple[int, int] | None
) -> None:
    capacity = 8
    ring, reference = ArrivedRing(capacity), OrderedDict[tuple[int, int], tuple[int, int]]()
    for ident, produced_ns, offset in arrivals:
        ring.put(ident, produced_ns, offset)
        reference[ident] = (produced_ns, offset)
        while len(reference) > capacity:
            reference.popitem(last=False)
    ring.forget_below(lowest)
    for ident in list(reference):
        if lowest is None or ident < lowest:
            del reference[ident]
    assert [(i, s, p, o) for i, s, p, o in ring.rows()] == [
        (*ident, *value) for ident, value in reference.items()
    ]
    for incarnation in INCARNATIONS:
        for seq in range(42):
            assert ring.get((incarnation, seq)) == reference.get((incarnation, seq))
    again = ArrivedRing.from_columns(capacity, json.loads(json.dumps(ring.columns())))
    assert list(again.rows()) == list(ring.rows())
    unpacked = ArrivedRing.from_packed(capacity, json.loads(json.dumps(ring.packed())))
    assert list(unpacked.rows()) == list(ring.rows())


def test_a_stream_judged_for_a_day_and_more_stays_a_few_kilobytes() -> None:
    """4,096 rounds fill a stream's memory (23 hours at 20 s); 5,000 rounds with an
    outage that lost some: its state, in the process and as JSON, is bounded by the
    runs and the newest READ_AT_KEPT arrivals, not by the canaries judged."""
    policy = JudgePolicy(freshness_ns=10**10, loss_timeout_ns=10**11)
    key, incarnation, start = StreamKey("p", "kafka", 0), 1_795_000_000 * 10**9, 10**18
    interval = 20 * 10**9
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        judge = Judge(policy)
        for seq in range(5_000):
            canary = Canary("p", incarnation, "kafka", 0, seq, start + seq * interval)
            now = canary.produced_ns + 10**8
            judge.on_acked(canary, now)
            if not 2_000 <= seq < 2_010:  # an outage: ten canaries never arrive
                judge.on_arrived(canary, now, offset=seq)
            judge.expire(now)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    exported = judge.export_state(key)
    assert exported is not None
    first = 5_000 - policy.memory
    assert exported["decided"] == [
        [incarnation, first, 2_000, False],
        [incarnation, 2_000, 2_010, True],
        [incarnation, 2_010, 5_000, False],
    ]
    assert len(ArrivedRing.from_packed(READ_AT_KEPT, exported["arrived"])) == READ_AT_KEPT
    assert held < 40_000, held  # was ~475 kB as dictionaries
    assert len(json.dumps(exported)) < 4_000  # 8 kB as JSON columns

"""The status board: what the page shows, recorded from findings with an injected clock."""

from __future__ import annotations

import doctest
import random

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

import probe.status_board
import probe.status_page
from probe.core.errors import RejectReason
from probe.core.judge import Anomaly, AnomalyKind, Fate, Judge, JudgePolicy, Outcome, StreamKey
from probe.endpoints import MetricsServer, build_app
from probe.metrics import StageSource
from probe.status_board import (
    SLO_WINDOWS,
    Objectives,
    StatusBoard,
    StatusView,
    worst_partitions,
)
from probe.status_page import WORST_PARTITIONS, render
from tests.status_dom import parse

S = 10**9
START_NS = 1_800_000_000 * S
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class Clock:
    def __init__(self) -> None:
        self.now_ns = START_NS

    def __call__(self) -> int:
        return self.now_ns


def key(partition: int) -> StreamKey:
    return StreamKey("p", "orders", partition)


def fate(partition: int, outcome: Outcome, latency_s: float | None = None, **kw: object) -> Fate:
    latency = None if latency_s is None else int(latency_s * S)
    return Fate(key(partition), 0, outcome, latency, **kw)  # type: ignore[arg-type]


def board_of(clock: Clock, **kw: object) -> StatusBoard:
    objectives = Objectives(
        availability=0.99, latency=0.9, latency_threshold_s=0.5,
        stage_latency_threshold_s={"sink": 5.0},
    )  # fmt: skip
    return StatusBoard(interval_s=10, objectives=objectives, clock_ns=clock, **kw)  # type: ignore[arg-type]


def test_doctests() -> None:
    assert doctest.testmod(probe.status_board).failed == 0
    assert doctest.testmod(probe.status_page).failed == 0


def test_rounds_count_the_verdicts_reached_in_each_and_show_idle_ones() -> None:
    clock = Clock()
    board = board_of(clock, rounds_kept=4)
    board.count("orders", "consumer", [fate(0, Outcome.DELIVERED, 0.1)] * 3)
    clock.now_ns += 10 * S
    board.count("orders", "consumer", [fate(1, Outcome.LOST), fate(2, Outcome.DELIVERED, 0.1)])
    board.count_invalid("orders", "consumer", RejectReason.BAD_SIGNATURE)
    clock.now_ns += 20 * S  # one round with nothing decided, then the current one
    rounds = board.rounds("orders", "consumer", clock.now_ns)
    assert [(r.delivered, r.lost, r.invalid, r.verdict) for r in rounds] == [
        (3, 0, 0, "ok"),
        (1, 1, 1, "failing"),
        (0, 0, 0, "idle"),
        (0, 0, 0, "idle"),
    ]
    assert [r.in_progress for r in rounds] == [False, False, False, True]
    assert rounds[1].started_ns == START_NS + 10 * S


def test_memory_is_bounded_whatever_the_partitions_and_rounds() -> None:
    clock = Clock()
    board = board_of(clock, rounds_kept=10, failures_kept=50)
    outage = [fate(p, Outcome.PRODUCE_FAILED, reason="timeout") for p in range(10_000)]
    for _ in range(30):
        board.count("orders", "consumer", outage)
        clock.now_ns += 10 * S
    assert len(board.failures(lambda target, partition: None)) == 50
    assert len(board.rounds("orders", "consumer", clock.now_ns)) == 10
    # The newest failures are kept: the last round's last partitions.
    assert board.failures(lambda t, p: None)[-1].partition == 9_999


def test_slo_windows_burn_rate_and_budget_left() -> None:
    clock = Clock()
    board = board_of(clock)
    # Two hours of 100 canaries a minute, all delivered fast; then in the last two
    # minutes 10 of 100 lost per minute and 50 of the arrived slow.
    for _ in range(120):
        board.count("orders", "consumer", [fate(0, Outcome.DELIVERED, 0.1)] * 100)
        clock.now_ns += 60 * S
    for _ in range(2):
        board.count(
            "orders",
            "consumer",
            [fate(0, Outcome.LOST)] * 10
            + [fate(0, Outcome.DELIVERED, 1.0)] * 50
            + [fate(0, Outcome.DELIVERED, 0.1)] * 40,
        )
        clock.now_ns += 60 * S
    clock.now_ns -= 1  # still in the last minute counted
    availability, latency = board.slos("orders", "consumer", clock.now_ns)
    windows = {w.window: w for w in availability.windows}
    assert (windows["5m"].good, windows["5m"].total) == (480, 500)
    assert windows["5m"].burn_rate == pytest.approx((20 / 500) / 0.01)
    assert windows["5m"].budget_left == pytest.approx(1 - 4.0)
    assert (windows["3d"].good, windows["3d"].total) == (12_180, 12_200)
    # The probe counted 122 minutes: longer windows say so.
    assert windows["1d"].counted_s == 122 * 60
    assert windows["1h"].counted_s == 3600
    slow = {w.window: w for w in latency.windows}
    assert (slow["5m"].good, slow["5m"].total) == (380, 480)
    assert [w.window for w in availability.windows] == [name for name, _ in SLO_WINDOWS]


def test_the_sink_is_judged_against_its_own_latency_threshold() -> None:
    clock = Clock()
    board = board_of(clock)
    board.count("orders", "sink", [fate(0, Outcome.DELIVERED, 1.0)] * 10)
    board.count("orders", "consumer", [fate(0, Outcome.DELIVERED, 1.0)] * 10)
    sink_latency = board.slos("orders", "sink", clock.now_ns)[1].windows[0]
    consumer_latency = board.slos("orders", "consumer", clock.now_ns)[1].windows[0]
    assert (sink_latency.good, consumer_latency.good) == (10, 0)


def test_minutes_older_than_the_longest_window_are_forgotten() -> None:
    clock = Clock()
    board = board_of(clock)
    board.count("orders", "consumer", [fate(0, Outcome.LOST)] * 5)
    clock.now_ns += 3 * 86_400 * S + 60 * S  # the slot's next lap
    board.count("orders", "consumer", [fate(0, Outcome.DELIVERED, 0.1)])
    availability, _ = board.slos("orders", "consumer", clock.now_ns)
    assert all((w.good, w.total) == (1, 1) for w in availability.windows)


def test_failures_name_reason_partition_broker_and_trace() -> None:
    clock = Clock()
    board = board_of(clock)
    board.count(
        "orders",
        "consumer",
        [
            fate(4, Outcome.PRODUCE_FAILED, reason="broker_unavailable", broker=2,
                 trace_context=TRACEPARENT),
            fate(5, Outcome.LOST),
            fate(6, Outcome.LATE, 7.5, broker=1),
            fate(7, Outcome.DELIVERED, 0.1),
            Anomaly(key(8), 3, AnomalyKind.DUPLICATE),
            Anomaly(StreamKey("", "orders", 9), -1, AnomalyKind.FOREIGN),
        ],
    )  # fmt: skip
    board.count_invalid("orders", "consumer", RejectReason.BAD_SIGNATURE)
    rows = board.failures(lambda target, partition: {5: 3}.get(partition))
    assert [(r.outcome, r.partition, r.broker) for r in rows] == [
        ("produce_failed", 4, 2),
        ("lost", 5, 3),  # the leader now, when the produce's is not known
        ("late", 6, 1),
        ("duplicate", 8, None),
        ("invalid", None, None),
    ]
    assert rows[0].reason == "not acknowledged: broker_unavailable"
    assert rows[0].trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert "7.5 s" in rows[2].reason
    assert "bad_signature" in rows[4].reason


def test_worst_partitions_are_the_stalest_twenty_without_sorting_all() -> None:
    rng = random.Random(7)
    staleness = {key(p): rng.randrange(0, 10**12) for p in range(10_000)}
    staleness[key(42)] = staleness[key(41)] = 2 * 10**12  # a tie: the lower partition first
    worst = worst_partitions(
        staleness, lambda k: k.partition, lambda v: v > 10**12, lambda p: p % 3
    )
    expected = sorted(staleness.items(), key=lambda kv: (-kv[1], kv[0].partition))
    assert len(worst) == WORST_PARTITIONS
    assert [w.partition for w in worst] == [k.partition for k, _ in expected[:WORST_PARTITIONS]]
    assert worst[0].partition == 41
    assert worst[0].staleness_s == pytest.approx(2000.0)
    assert worst[0].stale
    assert worst[0].leader == 41 % 3


def test_view_of_ten_thousand_partitions_stays_small() -> None:
    clock = Clock()
    board = board_of(clock)
    judge = Judge(JudgePolicy(freshness_ns=5 * S, loss_timeout_ns=60 * S))
    for p in range(10_000):
        judge.watch(key(p), START_NS - (p % 500) * S)
    long_reason = "x" * 200
    board.count(
        "orders",
        "consumer",
        [fate(p, Outcome.PRODUCE_FAILED, reason=long_reason) for p in range(10_000)],
    )
    source = StageSource("orders", "consumer", judge, 25 * S)
    view = StatusView(
        "run",
        "orders",
        lambda: (False, "kafka: unreachable"),
        board=board,
        sources=lambda: [source],
        refresh_s=10,
        clock_ns=clock,
    )
    snapshot = view()
    (stage,) = snapshot.stages
    assert stage.partitions == 10_000
    assert len(stage.worst) == WORST_PARTITIONS
    assert stage.stale_partitions == sum(1 for p in range(10_000) if p % 500 > 25)
    page = render(snapshot)
    assert len(page.encode()) < 200_000
    dom = parse(page)
    assert len(dom.find_all("tr", "partition")) == WORST_PARTITIONS
    assert len(dom.find_all("tr", "failure")) == 50


async def test_the_page_is_served_at_the_root() -> None:
    clock = Clock()
    board = board_of(clock)
    board.count("orders", "consumer", [fate(3, Outcome.LOST)])
    view = StatusView("run", "orders", lambda: (True, "ready"), board=board, clock_ns=clock)
    without_view = build_app(CollectorRegistry(), lambda: (False, "no broker answered"))
    servers = [
        MetricsServer(
            build_app(CollectorRegistry(), lambda: (True, "ready"), view), "127.0.0.1", 0
        ),
        MetricsServer(without_view, "127.0.0.1", 0),
    ]
    pages = []
    try:
        async with aiohttp.ClientSession() as session:
            for server in servers:
                await server.start()
                async with session.get(f"http://127.0.0.1:{server.port}/") as reply:
                    assert reply.status == 200
                    assert reply.headers["Content-Type"] == "text/html; charset=utf-8"
                    assert reply.headers["Cache-Control"] == "no-store"
                    pages.append(parse(await reply.text()))
    finally:
        for server in servers:
            await server.stop()
    with_board, bare = pages
    assert [s.attrs["data-stage"] for s in with_board.find_all("section", "stage")] == ["consumer"]
    assert with_board.find_all("tr", "failure")[0].attrs["data-partition"] == "3"
    # Without a view, / still says whether the probe is ready and why not.
    assert bare.by_id("readiness").cell("reason") == "no broker answered"  # type: ignore[union-attr]

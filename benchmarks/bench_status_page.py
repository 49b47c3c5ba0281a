"""The status page at 10,000 partitions: its size and the probe CPU one request costs.

Run: ``python benchmarks/bench_status_page.py [--partitions N] [--repeat N]``

Builds what a probe holds after three days at that scale, in process, with no broker:
a consumer-stage judge watching every partition (a few hundred of them silent, so
stale), the metrics registry of `run`, and a status board fed every round of the three
days (one round a minute here: every SLO window's slots filled), the last hour with
each partition's fate, the last rounds in a broker outage (every canary produce_failed: the failures
ring full). Then takes the page as ``/`` does (snapshot + render) and ``/metrics`` as
a scrape does, ``--repeat`` times each, and prints the page's bytes and the median CPU
time (process time, the probe's own CPU) of both, the scrape as the floor the page is
compared with. The targets (issue: under 200 kB, under 50 ms of CPU) are printed
beside, and what recording one round's fates on the board costs (the recorder's
share of the probe's CPU per round); nothing is asserted.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

from probe.config import load
from probe.core.judge import Fate, Judge, JudgePolicy, Outcome, OwnProbe, StreamKey
from probe.endpoints import exposition
from probe.metrics import service_metrics
from probe.status_board import Objectives, StatusBoard, StatusView
from probe.status_page import render

PAGE_LIMIT_BYTES = 200_000
PAGE_LIMIT_CPU_MS = 50.0
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def cpu_ms(action: Callable[[], object], repeat: int) -> tuple[float, object]:
    times = []
    result: object = None
    for _ in range(repeat):
        started = time.process_time_ns()
        result = action()
        times.append((time.process_time_ns() - started) / 1e6)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    n = args.partitions

    day_ns = 86_400 * 10**9
    now_ns = 1_800_000_000 * 10**9
    clock = [now_ns - 3 * day_ns]
    config = load(overrides={"kafka.bootstrap_servers": "127.0.0.1:9092"})
    registry, metrics = service_metrics(config)
    own = OwnProbe("bench", 1)
    judge = Judge(JudgePolicy(freshness_ns=5 * 10**9, loss_timeout_ns=60 * 10**9), own=own)
    keys = [StreamKey("bench", "kafka", p) for p in range(n)]
    for key in keys:
        judge.watch(key, clock[0])
    metrics.declare_target("kafka")
    metrics.declare_stage("kafka", "consumer", judge)
    board = StatusBoard(interval_s=60, objectives=Objectives.of(config), clock_ns=lambda: clock[0])

    # Three days of one round a minute: every SLO slot filled (with a sample of the
    # fates: a slot's numbers cost the same to sum whatever they are), then the last
    # hour's rounds in full, the last five minutes in an outage.
    fates = [Fate(key, 0, Outcome.DELIVERED, 42_000_000, TRACEPARENT, 1) for key in keys]
    while clock[0] < now_ns - 3600 * 10**9:
        board.count("kafka", "consumer", fates[:100])
        clock[0] += 60 * 10**9
    round_ms, _ = cpu_ms(lambda: board.count("kafka", "consumer", fates), 5)
    while clock[0] < now_ns - 5 * 60 * 10**9:
        board.count("kafka", "consumer", fates)
        clock[0] += 60 * 10**9
    failed = [
        Fate(key, 1, Outcome.PRODUCE_FAILED, None, TRACEPARENT, 2, "broker_unavailable")
        for key in keys
    ]
    while clock[0] < now_ns:
        board.count("kafka", "consumer", failed)
        clock[0] += 60 * 10**9
    # Staleness: every partition fresh but a few hundred silent for minutes.
    from probe.core.canary import Canary  # noqa: PLC0415 - only to age the streams

    for p in range(n):
        produced = now_ns - (600 * 10**9 if p % 37 == 0 else 3 * 10**9)
        canary = Canary("bench", 1, "kafka", p, seq=0, produced_ns=produced)
        judge.on_arrived(canary, produced + 10_000_000)

    view = StatusView(
        "run",
        "kafka",
        lambda: (False, "kafka: broker 127.0.0.1:9092 unreachable (connection refused)"),
        board=board,
        sources=metrics.staleness.sources,
        leader_of=metrics.replica_state.leader_of,
        refresh_s=20,
        clock_ns=lambda: now_ns,
    )
    page_ms, page = cpu_ms(lambda: render(view()), args.repeat)
    snapshot_ms, _ = cpu_ms(view, args.repeat)
    scrape_ms, scraped = cpu_ms(lambda: exposition(registry, "text/plain")[0], args.repeat)
    page_bytes = len(str(page).encode())
    assert isinstance(scraped, bytes)

    print(f"# {platform.python_implementation()} {platform.python_version()}, {n} partitions")
    print(f"recording a round's {n} fates on the board: {round_ms:.2f} ms CPU")
    print(f"page:      {page_bytes / 1000:8.1f} kB   (limit {PAGE_LIMIT_BYTES / 1000:.0f} kB)")
    print(f"/metrics:  {len(scraped) / 1000:8.1f} kB")
    print(
        f"page CPU:  {page_ms:8.2f} ms median of {args.repeat} "
        f"(snapshot {snapshot_ms:.2f} ms, render {page_ms - snapshot_ms:.2f} ms; "
        f"limit {PAGE_LIMIT_CPU_MS:.0f} ms)"
    )
    print(f"/metrics CPU: {scrape_ms:5.2f} ms median (the floor)")
    print(f"page / scrape CPU: {page_ms / scrape_ms:.2f}")


if __name__ == "__main__":
    main()

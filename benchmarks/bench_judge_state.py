"""What a stream's judge state costs the Spark sink: written at every batch the stream
has a record in, read when the worker did not write it last.

Run: ``python benchmarks/bench_judge_state.py [--rounds 300,5000] [--runs R] [--calls N]``

For each age (rounds judged: 300 fills the newest arrivals kept, READ_AT_KEPT = 256;
4,096 fills the decided memory too), one stream is judged that many rounds, a canary
each, with an outage of ten lost canaries halfway. Then timed, as the judge operator
does them (probe.spark.judge_operator), ``--calls`` times back to back per run:

* write: ``export_state`` and ``json.dumps`` (compact separators);
* read: ``json.loads`` and ``import_state`` into a new judge.

Printed: the state's bytes as JSON, and the median over ``--runs`` runs of each, in
microseconds, on one core. At 10,000 partitions every 20 s the sink writes 500 states a
second. Figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

from probe.core.canary import Canary
from probe.core.judge import Judge, JudgePolicy, StreamKey

POLICY = JudgePolicy(freshness_ns=10 * 10**9, loss_timeout_ns=60 * 10**9)
KEY = StreamKey("sla-probe-7d9f8c6b5-x2x4z", "kafka", 17)
INCARNATION = 1_795_000_000 * 10**9
INTERVAL_NS = 20 * 10**9


def judged(rounds: int) -> Judge:
    judge = Judge(POLICY)
    start = INCARNATION + 10**9
    for seq in range(rounds):
        # Produce times as a probe stamps them: the interval, plus a few ms of jitter.
        produced = start + seq * INTERVAL_NS + (seq * 7_919_113) % 9_000_000
        canary = Canary(KEY.probe_id, INCARNATION, KEY.target, KEY.partition, seq, produced)
        now = produced + 80_000_000
        judge.on_acked(canary, now)
        if not rounds // 2 <= seq < rounds // 2 + 10:
            judge.on_arrived(canary, now, offset=seq)
        judge.expire(now)
    return judge


def timed(call: object, calls: int, runs: int) -> float:
    assert callable(call)
    medians = []
    for _ in range(runs):
        began = time.perf_counter()
        for _ in range(calls):
            call()
        medians.append((time.perf_counter() - began) / calls)
    return statistics.median(medians) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--rounds", type=lambda text: [int(r) for r in text.split(",")], default=[300, 5000]
    )
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    print(f"bench_judge_state: python {platform.python_version()}, one core")
    for rounds in args.rounds:
        judge = judged(rounds)
        text = json.dumps(judge.export_state(KEY), separators=(",", ":"))

        def write(judge: Judge = judge) -> str:
            return json.dumps(judge.export_state(KEY), separators=(",", ":"))

        def read(text: str = text) -> None:
            Judge(POLICY).import_state(KEY, json.loads(text))

        print(
            f"  {rounds:>5} rounds: state {len(text):>5} B, write "
            f"{timed(write, args.calls, args.runs):6.0f} us, read "
            f"{timed(read, args.calls, args.runs):6.0f} us"
        )


if __name__ == "__main__":
    main()

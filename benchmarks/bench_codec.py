"""Throughput of the canary codec on one core: sign+encode/s and decode+verify/s.

Run: ``python benchmarks/bench_codec.py [--records N] [--runs R]``

Each run times N calls back to back with ``time.perf_counter``; the median over the
runs is reported, so one noisy run on a shared machine does not move the figure.
The target is the probe's budget (>= 50,000/s each way): a producer writing to
thousands of partitions, or a Spark executor verifying a backlog, must never be
bound by the codec. Figures only; speed is not asserted.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

from probe.core.canary import Canary, decode, encode
from probe.core.keys import generate_key_ring

TARGET_PER_SECOND = 50_000
# A realistic record: typical id lengths and a W3C traceparent.
CANARY = Canary(
    probe_id="sla-probe-7d9f8c6b5-x2x4z",
    incarnation=1_700_000_000_000_000_000,
    target="kafka-prod-eu-west-1",
    partition=17,
    seq=123_456,
    produced_ns=1_700_000_123_456_789_012,
    trace_context="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
)


def per_second(operation: Callable[[], object], records: int, runs: int) -> list[float]:
    rates = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(records):
            operation()
        rates.append(records / (time.perf_counter() - start))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000, help="records per run")
    parser.add_argument("--runs", type=int, default=7, help="timed runs (median reported)")
    parser.add_argument("--pad-to", type=int, default=0, help="pad records to this many bytes")
    options = parser.parse_args()

    ring = generate_key_ring()
    record = encode(CANARY, ring, pad_to=options.pad_to)
    if decode(record, ring) != CANARY:  # a broken codec must not produce a figure
        raise SystemExit("codec round trip failed; no figures")

    def sign_and_encode() -> bytes:
        return encode(CANARY, ring, pad_to=options.pad_to)

    def decode_and_verify() -> Canary:
        return decode(record, ring)

    per_second(sign_and_encode, options.records // 10, 1)  # warm-up
    print(
        f"python {platform.python_version()} on {platform.machine()}, "
        f"{len(record)}-byte record, {options.runs} runs x {options.records:,} records"
    )
    for name, operation in (
        ("sign+encode", sign_and_encode),
        ("decode+verify", decode_and_verify),
    ):
        rates = per_second(operation, options.records, options.runs)
        median = statistics.median(rates)
        verdict = "met" if median >= TARGET_PER_SECOND else "MISSED"
        print(
            f"{name:>14}: median {median:>10,.0f}/s  "
            f"(min {min(rates):,.0f}, max {max(rates):,.0f}; "
            f"target >= {TARGET_PER_SECOND:,}/s: {verdict})"
        )


if __name__ == "__main__":
    main()

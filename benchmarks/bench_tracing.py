"""Canary latency with traces exported to a dead collector, against no export at all.

Run: ``python benchmarks/bench_tracing.py [--rounds N] [--fetch-wait-ms MS]``

One embedded broker; each mode runs in a child process of its own (a process has one
tracer provider): ``none`` (OTEL_TRACES_EXPORTER unset: spans are made, not exported)
and ``dead`` (OTEL_TRACES_EXPORTER=otlp to a loopback port nobody listens on, small
queue, so the exporter keeps failing and the queue keeps overflowing). Each child runs
``TargetProbe`` rounds back to back (next round once the last canary arrived) and
reports the consumer stage's latencies; the parent prints both p50s and their ratio,
and the spans the dead mode dropped. Figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from probe import tracing
from probe.config import load
from probe.core.errors import RejectReason
from probe.core.judge import Fate, Finding
from probe.core.keys import generate_key_ring
from probe.embedded import EmbeddedBroker, free_loopback_port
from probe.stages.target import TargetProbe

WARMUP_ROUNDS = 3


@dataclass
class Latencies:
    ms: list[float] = field(default_factory=list)

    def count(self, target: str, stage: str, findings: Sequence[Finding]) -> None:
        self.ms.extend(
            f.latency_ns / 1e6 for f in findings if isinstance(f, Fate) and f.latency_ns is not None
        )

    def count_invalid(self, target: str, stage: str, reason: RejectReason) -> None:
        raise AssertionError(reason)


async def child(servers: str, rounds: int, wait_ms: int) -> dict[str, object]:
    tracing.install_tracer_provider("bench", ["kafka"])
    config = load(
        overrides={
            "kafka.bootstrap_servers": servers,
            "kafka.topic": f"bench-{uuid.uuid4().hex[:8]}",
            "kafka.create_topic": True,
            "kafka.partitions": 3,
            "kafka.fetch_max_wait": f"{wait_ms}ms",
        }
    )
    latencies = Latencies()
    probe = TargetProbe(config, generate_key_ring(), [latencies])
    await probe.connect(give_up_after=10)
    consumer = asyncio.create_task(probe.consume())
    try:
        for number in range(WARMUP_ROUNDS + rounds):
            if number == WARMUP_ROUNDS:
                latencies.ms.clear()
            await probe.produce_round()
            if not await probe.settle(10):
                raise RuntimeError("a canary did not arrive")
    finally:
        consumer.cancel()
        await probe.close()
    dropped = tracing.EXPORT_STATS.dropped()
    tracing.shutdown(0.5)
    return {"p50_ms": statistics.median(latencies.ms), "n": len(latencies.ms), "dropped": dropped}


def run_mode(mode: str, servers: str, rounds: int, wait_ms: int) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if mode == "dead":
        env |= {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_loopback_port()}",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            "OTEL_BSP_MAX_QUEUE_SIZE": "64",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "32",
        }
    command = [sys.executable, __file__, "--child", servers, f"--rounds={rounds}"]
    command.append(f"--fetch-wait-ms={wait_ms}")
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--fetch-wait-ms", type=int, default=5)
    parser.add_argument("--child", metavar="SERVERS")
    options = parser.parse_args()
    if options.child:
        result = asyncio.run(child(options.child, options.rounds, options.fetch_wait_ms))
        print(json.dumps(result))
        return
    print(f"{platform.node()}: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    with EmbeddedBroker() as broker:
        figures = {}
        # Alternate, twice each, so machine noise hits both modes.
        for mode in ("none", "dead", "none", "dead"):
            result = run_mode(mode, broker.bootstrap_servers, options.rounds, options.fetch_wait_ms)
            print(f"{mode:5} p50 {result['p50_ms']:.2f} ms over {result['n']}, {result['dropped']}")
            figures.setdefault(mode, []).append(float(str(result["p50_ms"])))
    none, dead = statistics.median(figures["none"]), statistics.median(figures["dead"])
    print(f"p50 no export {none:.2f} ms, dead collector {dead:.2f} ms, ratio {dead / none:.3f}")


if __name__ == "__main__":
    main()

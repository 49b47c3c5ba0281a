"""The mirror stage beside the consumer stage: replication latency through a real
MirrorMaker 2, measured in one run.

Run: ``python benchmarks/bench_mirror.py [--partitions 6] [--interval 1] [--window 120]
[--policy default|identity]`` (needs ``make kafka``: Apache Kafka's jars and
MirrorMaker 2's).

A source cluster of three Apache Kafka brokers (as the tests'), a target cluster of
one, MirrorMaker 2 in dedicated mode between them (its test settings:
probe.apache_kafka.mirror), the canary topic created on the source before the mirror
starts (as docs/mirrors.md advises), then ``sla-probe run --stages consumer,mirror``
for the window after the mirror stage's first delivered canary. Printed per stage:
canaries by outcome over the window, and p50/p99 from the probe's own histogram
(interpolated in the bucket, as histogram_quantile does: bench_scale.quantile), then
the mirror's over the consumer's, as ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import latency_buckets, quantile, scrape, total, wait_until

from probe.apache_kafka.cluster import KafkaCluster
from probe.apache_kafka.mirror import MirrorMaker2
from probe.core.keys import generate_key_ring
from probe.embedded import free_loopback_port

SLA_PROBE = Path(sys.executable).with_name("sla-probe")
TOPIC = "synthetic-sla"
STAGES = ("consumer", "mirror")


def create_topic(
    servers: str, partitions: int, replication: int = 3, settings: dict[str, str] | None = None
) -> None:
    """The canary topic, with these settings of its own (bench_tiered's too)."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: PLC0415

    async def create() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=servers)
        await admin.start()
        try:
            topic = NewTopic(TOPIC, partitions, replication, topic_configs=settings or {})
            await admin.create_topics([topic])
        finally:
            await admin.close()

    asyncio.run(create())


def mirror_delivered(port: int) -> float:
    """Canaries delivered at the mirror stage so far; 0 while the probe is not serving."""
    try:
        samples = scrape(port)[0]
    except OSError:
        return 0.0
    return total(samples, "synthetic_sla_canaries_total", stage="mirror", outcome="delivered")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--window", type=float, default=120.0)
    parser.add_argument("--policy", choices=["default", "identity"], default="default")
    options = parser.parse_args()
    print(f"machine: {platform.node()}, {platform.processor() or platform.machine()}")
    with tempfile.TemporaryDirectory(prefix="bench-mirror-") as scratch:
        work = Path(scratch)
        keys = work / "keys.json"
        keys.write_text(generate_key_ring("bench").to_json())
        config = work / "probe.yaml"
        with (
            KafkaCluster(workdir=work / "source", quick_start=False) as source,
            KafkaCluster(1, workdir=work / "target", quick_start=False) as target,
        ):
            create_topic(source.bootstrap_servers, options.partitions)
            config.write_text(
                f"mirror: {{bootstrap_servers: '{target.bootstrap_servers}', "
                f"replication_policy: {options.policy}}}\n"
            )
            with MirrorMaker2(
                source.bootstrap_servers,
                target.bootstrap_servers,
                workdir=work / "mm2",
                topics=TOPIC,
                policy=options.policy,
            ):
                port = free_loopback_port()
                log = (work / "probe.log").open("wb")
                probe = subprocess.Popen(
                    [SLA_PROBE, "run", "--bootstrap-servers", source.bootstrap_servers,
                     "--topic", TOPIC, "--signing-key-file", str(keys), "--interval",
                     str(options.interval), "--metrics-port", str(port), "--stages",
                     ",".join(STAGES), "--config", str(config), "--no-create-topic"],
                    stdout=log, stderr=subprocess.STDOUT,
                )  # fmt: skip
                try:
                    wait_until(
                        lambda: mirror_delivered(port) > 0,
                        120,
                        "the mirror stage's first delivered canary",
                    )
                    before = scrape(port)[0]
                    time.sleep(options.window)
                    after = scrape(port)[0]
                finally:
                    probe.terminate()
                    probe.wait(30)
    print(
        f"{options.partitions} partitions @ {options.interval:g} s, {options.window:g} s, "
        f"policy {options.policy}, MirrorMaker 2 between a 3-broker and a 1-broker cluster"
    )
    p50s, p99s = {}, {}
    for stage in STAGES:
        outcomes = {
            outcome: total(after, "synthetic_sla_canaries_total", stage=stage, outcome=outcome)
            - total(before, "synthetic_sla_canaries_total", stage=stage, outcome=outcome)
            for outcome in ("delivered", "late", "lost")
        }
        buckets = latency_buckets(before, after, stage)
        p50s[stage], p99s[stage] = quantile(0.5, buckets), quantile(0.99, buckets)
        print(
            f"  {stage:9} {outcomes}  p50 {p50s[stage] * 1000:.0f} ms  "
            f"p99 {p99s[stage] * 1000:.0f} ms"
        )
    print(
        f"  mirror over consumer: p50 {p50s['mirror'] / p50s['consumer']:.1f}x, "
        f"p99 {p99s['mirror'] / p99s['consumer']:.1f}x"
    )


if __name__ == "__main__":
    main()

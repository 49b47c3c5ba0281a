"""The tiered read beside the consumer stage: the time to a tiered read's first record,
from a real remote store, measured in one run.

Run: ``python benchmarks/bench_tiered.py [--partitions 6] [--interval 1] [--window 120]
[--age 20] [--every 2]`` (needs ``make kafka``: the ``tiered`` jar set).

One Apache Kafka 4.3.1 broker with tiered storage on and LocalTieredStorage as its
remote store (a directory: probe.apache_kafka.tiered), full JIT; the canary topic made
with tiered storage on, its segments rolled every second and leaving the local log 5 s
after; then ``sla-probe run`` with ``tiered.enabled`` (reads of canaries ``age``
seconds old, every ``every`` seconds, three partitions each) for the window after the
first read that served. Printed: the consumer stage's canaries and p50/p99, the tiered
reads by outcome and their first record's p50/p99 (from the probe's own histograms,
interpolated in the bucket as histogram_quantile does), and the ratios. A remote store
on the local disk is the floor of what a real one (an object store over the network)
costs: the figure is the broker's remote read path, not the store.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_mirror import TOPIC, create_topic
from bench_scale import latency_buckets, quantile, scrape, total, wait_until

from probe.apache_kafka.cluster import TIERED, KafkaCluster
from probe.apache_kafka.tiered import TOPIC_SETTINGS, RemoteStore
from probe.core.keys import generate_key_ring
from probe.embedded import free_loopback_port
from probe.transport.kafka_admin import ClusterAdmin

SLA_PROBE = Path(sys.executable).with_name("sla-probe")
READS = "synthetic_sla_tiered_reads_total"


def create_tiered_topic(servers: str, partitions: int) -> None:
    create_topic(servers, partitions, 1, TOPIC_SETTINGS)
    with ClusterAdmin(servers) as admin:
        assert admin.topic_setting(TOPIC, "remote.storage.enable") == "true"


def served(port: int) -> float:
    """Tiered reads that served so far; 0 while the probe is not serving."""
    try:
        samples = scrape(port)[0]
    except OSError:
        return 0.0
    return total(samples, READS, outcome="read")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--window", type=float, default=120.0)
    parser.add_argument("--age", type=float, default=20.0)
    parser.add_argument("--every", type=float, default=2.0)
    options = parser.parse_args()
    print(f"machine: {platform.node()}, {platform.processor() or platform.machine()}")
    with tempfile.TemporaryDirectory(prefix="bench-tiered-") as scratch:
        work = Path(scratch)
        keys = work / "keys.json"
        keys.write_text(generate_key_ring("bench").to_json())
        config = work / "probe.yaml"
        config.write_text(
            f"tiered: {{enabled: true, age: {options.age}s, every: {options.every}s, "
            f"timeout: {options.every * 0.75}s, partitions: 3}}\n"
        )
        store = RemoteStore(work / "remote")
        with KafkaCluster(
            1, workdir=work / "kafka", settings=store.broker_settings(), release=TIERED,
            quick_start=False,
        ) as cluster:  # fmt: skip
            create_tiered_topic(cluster.bootstrap_servers, options.partitions)
            port = free_loopback_port()
            log = (work / "probe.log").open("wb")
            probe = subprocess.Popen(
                [SLA_PROBE, "run", "--bootstrap-servers", cluster.bootstrap_servers,
                 "--topic", TOPIC, "--signing-key-file", str(keys), "--interval",
                 str(options.interval), "--metrics-port", str(port), "--config", str(config),
                 "--no-create-topic"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
            try:
                try:
                    wait_until(lambda: served(port) > 0, options.age + 120, "a tiered read served")
                except BaseException:
                    print((work / "probe.log").read_text(errors="replace")[-3000:])
                    raise
                before = scrape(port)[0]
                time.sleep(options.window)
                after = scrape(port)[0]
            finally:
                probe.terminate()
                probe.wait(30)
    print(
        f"{options.partitions} partitions @ {options.interval:g} s, {options.window:g} s; "
        f"tiered reads of {options.age:g} s old canaries every {options.every:g} s, 3 "
        "partitions each; Apache Kafka 4.3.1, LocalTieredStorage"
    )
    outcomes = {
        outcome: total(after, "synthetic_sla_canaries_total", stage="consumer", outcome=outcome)
        - total(before, "synthetic_sla_canaries_total", stage="consumer", outcome=outcome)
        for outcome in ("delivered", "late", "lost")
    }
    consumer = latency_buckets(before, after, "consumer")
    c50, c99 = quantile(0.5, consumer), quantile(0.99, consumer)
    print(f"  consumer  {outcomes}  p50 {c50 * 1000:.0f} ms  p99 {c99 * 1000:.0f} ms")
    reads = {
        outcome: total(after, READS, outcome=outcome) - total(before, READS, outcome=outcome)
        for outcome in ("read", "failed", "invalid", "no_canary")
    }
    first = latency_buckets(before, after, None, "synthetic_sla_tiered_first_record_seconds")
    t50, t99 = quantile(0.5, first), quantile(0.99, first)
    print(f"  tiered    {reads}  first record p50 {t50 * 1000:.0f} ms  p99 {t99 * 1000:.0f} ms")
    print(f"  tiered over consumer: p50 {t50 / c50:.1f}x, p99 {t99 / c99:.1f}x")


if __name__ == "__main__":
    main()

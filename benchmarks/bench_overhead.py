"""Probe overhead: the probe's measured latency against a bare aiokafka round trip.

Run: ``python benchmarks/bench_overhead.py [--broker embedded|apache-kafka]
[--fetch-wait-ms MS ...] [--blocks B] [--samples N]``

One broker (the embedded one, or Apache Kafka's three-broker cluster: RF 3, min ISR
2, acks=all, neither side idempotent, as the probe by default), one process. For each
consumer fetch max wait, blocks of three sides rotate, so machine noise hits all: the
bare client one record at a time (the broker's own floor), the bare client sending a
round like the probe's (one record to every partition at once: the probe's floor;
on a cluster three leaders answer at once, and that alone costs milliseconds), and
the probe (``TargetProbe``: signed canaries, the consumer stage and its judge). Every
block has its own topic. All stamp the same points: wall clock before the send, and
right after ``getmany`` returns. The pooled medians are compared; the target is the
probe within 1 ms of the bare rounds.

Apache Kafka answers a fetch as soon as data arrives: there the floor is the round
trip itself (replication to the followers before the acks=all acknowledgement
included), whatever the fetch wait.

The embedded broker (Tansu) answers a fetch only when its max wait runs out, so the
fetch wait dominates both figures; that is the broker, not the probe. It also makes a
latency depend on when in the fetch cycle a record is sent. Both sides therefore send
the next record (round) as soon as the last one arrived, and the probe's rounds skip
the metadata refresh of ``TargetProbe.produce_round()``: the refresh lies outside the
measured latency, but its round trip would shift the probe's sends later in the
cycle and make it look faster than bare. Figures only; speed is not asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from probe import tracing
from probe.apache_kafka.cluster import KafkaCluster
from probe.config import StageName, load
from probe.core.judge import Finding
from probe.core.keys import generate_key_ring
from probe.embedded import EmbeddedBroker
from probe.services.report import Tally
from probe.stages.target import TargetProbe

TARGET_MS = 1.0
PARTITIONS = 3
# The first round of a block pays for fresh connections and metadata; not a sample.
WARMUP = PARTITIONS
ROUND_TIMEOUT = 10.0  # a record not back by then is lost: a broken run, not a slow one


async def bare_block(
    servers: str, topic: str, wait_ms: int, samples: int, *, rounds: bool = False
) -> list[float]:
    """Latencies (ms) of plain records sent one at a time, round-robin over partitions;
    with ``rounds``, one record to every partition at once, as the probe sends a round
    (on a cluster: three leaders answering at once; each record stamped when sent)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=servers)
    await admin.start()
    try:
        brokers = len((await admin.describe_cluster())["brokers"])
        await admin.create_topics([NewTopic(topic, PARTITIONS, min(3, brokers))])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=servers, acks="all", linger_ms=0, enable_idempotence=False
    )
    consumer = AIOKafkaConsumer(
        bootstrap_servers=servers,
        group_id=None,
        fetch_max_wait_ms=wait_ms,
        enable_auto_commit=False,
    )
    await producer.start()
    await consumer.start()
    waiting: dict[bytes, asyncio.Future[int]] = {}

    async def consume() -> None:
        while True:
            batch = await consumer.getmany(timeout_ms=1000)
            at_ns = time.time_ns()
            for records in batch.values():
                for record in records:
                    waiting.pop(record.value or b"").set_result(at_ns)

    try:
        partitions = sorted(await producer.partitions_for(topic))
        assigned = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(assigned)
        await consumer.seek_to_end(*assigned)
        for tp in assigned:  # resolve positions now, not on the first fetch
            await consumer.position(tp)
        reader = asyncio.create_task(consume())
        latencies: list[float] = []
        loop = asyncio.get_running_loop()
        per_send = partitions if rounds else [None]
        for i in range(-(-samples // len(per_send))):
            sent: list[tuple[int, asyncio.Future[int]]] = []
            for j, _ in enumerate(per_send):
                value = f"sample-{i}-{j}".encode()
                arrived = waiting[value] = loop.create_future()
                partition = partitions[(i + j) % len(partitions)]
                sent.append((time.time_ns(), arrived))
                delivery = await producer.send(topic, value, partition=partition)
                if not rounds:
                    await delivery
            async with asyncio.timeout(ROUND_TIMEOUT):
                for sent_ns, arrived in sent:
                    latencies.append((await arrived - sent_ns) / 1e6)
        reader.cancel()
    finally:
        await producer.stop()
        await consumer.stop()
    return latencies[WARMUP:]


class _Signalling(Tally):
    """A Tally that wakes the round loop as soon as a fate is recorded (no polling)."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.recorded = asyncio.Event()

    def count(self, target: str, stage: str, findings: Sequence[Finding]) -> None:
        super().count(target, stage, findings)
        self.recorded.set()


async def probe_block(servers: str, topic: str, wait_ms: int, samples: int) -> list[float]:
    """Latencies (ms) the probe itself measured: rounds of one canary per partition."""
    config = load(
        overrides={
            "kafka.bootstrap_servers": servers,
            "kafka.topic": topic,
            "kafka.create_topic": True,
            "kafka.partitions": PARTITIONS,
            "kafka.fetch_max_wait": f"{wait_ms}ms",
        }
    )
    tally = _Signalling(config.target)
    target = TargetProbe(config, generate_key_ring(), [tally])
    await target.connect(give_up_after=ROUND_TIMEOUT)  # creates and covers the topic
    assert target.producer is not None
    consumer = asyncio.create_task(target.consume())
    try:
        for _ in range(-(-samples // len(target.partitions))):
            await target.producer.produce_round(target.partitions)
            async with asyncio.timeout(ROUND_TIMEOUT):
                while target.judge.pending_count() > 0:
                    tally.recorded.clear()
                    await tally.recorded.wait()
    finally:
        consumer.cancel()
        await target.close()
    if not tally.ok:  # a lost, late or invalid canary: the probe is broken here
        raise SystemExit(f"probe block {topic} not ok: {tally.to_json()}")
    return tally.stages[StageName.CONSUMER].latencies_ms[WARMUP:]


async def compare(servers: str, wait_ms: int, blocks: int, samples: int) -> None:
    sides = ("bare", "round", "probe")
    pooled: dict[str, list[float]] = {side: [] for side in sides}
    for block in range(blocks):
        # Rotate which side goes first, so none always runs on a warmer machine.
        order = sides[block % 3 :] + sides[: block % 3]
        medians = {}
        for side in order:
            topic = f"bench-overhead-{side}-{wait_ms}ms-{block}-{time.time_ns()}"
            if side == "probe":
                latencies = await probe_block(servers, topic, wait_ms, samples)
            else:
                latencies = await bare_block(
                    servers, topic, wait_ms, samples, rounds=side == "round"
                )
            pooled[side] += latencies
            medians[side] = statistics.median(latencies)
        print(
            f"  block {block + 1}: "
            + "  ".join(f"{side} {medians[side]:6.2f} ms" for side in sides)
        )
    # The probe sends a round (a record to every partition at once): the bare client
    # doing the same is its floor; one record at a time is the broker's own floor.
    bare, probe = (statistics.median(pooled[side]) for side in ("round", "probe"))
    # Within means either way: a probe faster than bare would be a measurement error.
    verdict = "met" if abs(probe - bare) <= TARGET_MS else "MISSED"
    single = statistics.median(pooled["bare"])
    print(
        f"fetch wait {wait_ms} ms: bare one-at-a-time median {single:.2f} ms, bare rounds "
        f"{bare:.2f} ms, probe {probe:.2f} ms ({len(pooled['probe'])} vs "
        f"{len(pooled['round'])} samples); probe - bare rounds {probe - bare:+.2f} ms, ratio "
        f"{probe / bare:.3f} (target within {TARGET_MS:g} ms: {verdict})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--fetch-wait-ms", type=int, nargs="+", default=[1, 100], help="consumer fetch max waits"
    )
    parser.add_argument("--blocks", type=int, default=4, help="blocks per side and fetch wait")
    parser.add_argument("--samples", type=int, default=210, help="records per block")
    parser.add_argument("--broker", choices=["embedded", "apache-kafka"], default="embedded")
    options = parser.parse_args()

    tracing.install_tracer_provider()  # as `sla-probe` does: real spans, real cost
    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{options.broker} broker, {options.blocks} blocks x {options.samples} records per side"
    )
    with contextlib.ExitStack() as stack:
        if options.broker == "embedded":
            broker: EmbeddedBroker | KafkaCluster = stack.enter_context(EmbeddedBroker())
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            broker = stack.enter_context(KafkaCluster(workdir=workdir, quick_start=False))
        for wait_ms in options.fetch_wait_ms:
            asyncio.run(compare(broker.bootstrap_servers, wait_ms, options.blocks, options.samples))


if __name__ == "__main__":
    main()

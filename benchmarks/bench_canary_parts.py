"""What each part of a canary's life costs in the probe's process, per canary.

Run: ``python benchmarks/bench_canary_parts.py [--canaries N] [--partitions P] [--repeat R]``

In one process, no broker: each part is timed over N canaries (a round of P
partitions at a time, as the probe sends them), R times, and the median is printed
in microseconds of CPU per canary. The parts:

* sign: the canary built and encoded with its HMAC (``core.canary.encode``);
* produce span: ``tracing.produce_span`` around a send, spans exported nowhere (the
  default: ids only);
* acknowledge: ``Stage.on_acked`` (the judge told, the canary remembered) and the
  producer's acknowledgement latency observed;
* produce request: aiokafka encoding one ProduceRequest for the round's records (a
  batch per partition, as the probe's producer builds them);
* fetch response: aiokafka decoding one FetchResponse carrying the round's records
  (a batch per partition), and the records read out of its batches;
* arrival: ``Stage.on_arrival`` as the consumer stage runs it, with the probe's
  metrics: verify (decode and HMAC), judge, fate span and log fields, metrics;
  and each of its parts alone: verify, judge, metrics.

Process CPU time (``time.process_time``), so other processes on the machine do not
count; the figures still vary by a tenth or so between runs on a shared VM. Compare
within one run. The network, the event loop's turns and the broker's answers are not
here: ``bench_scale.py`` measures the whole process against the bare client and a
peer.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from aiokafka.protocol.fetch import FetchResponse_v4
from aiokafka.protocol.produce import ProduceRequest_v7
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from prometheus_client import CollectorRegistry

from probe import tracing
from probe.core.canary import Canary, classify, encode
from probe.core.judge import Judge, JudgePolicy, OwnProbe
from probe.core.keys import generate_key_ring
from probe.metrics import ProbeMetrics
from probe.stages.stage import Stage
from probe.transport import Arrival

OWN = OwnProbe("bench-probe", incarnation=1)
RING = generate_key_ring("k1")
TOPIC = "synthetic-sla"
SECOND = 1_000_000_000


def canaries(rounds: int, partitions: int) -> list[Canary]:
    return [
        Canary(
            OWN.probe_id,
            OWN.incarnation,
            "kafka",
            p,
            seq,
            produced_ns=(seq + 1) * SECOND,
            trace_context=f"00-{seq * partitions + p + 1:032x}-{p + 1:016x}-00",
        )
        for seq in range(rounds)
        for p in range(partitions)
    ]


def stage_with_metrics() -> tuple[Stage, ProbeMetrics]:
    judge = Judge(JudgePolicy(freshness_ns=5 * SECOND, loss_timeout_ns=60 * SECOND), own=OWN)
    metrics = ProbeMetrics(CollectorRegistry())
    stage = Stage("consumer", "kafka", judge, RING, own=OWN, recorders=[metrics])
    metrics.declare_stage("kafka", "consumer", judge)
    return stage, metrics


def batch_bytes(payload: bytes, offset: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=0, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=16384,
    )  # fmt: skip
    builder.append(0, timestamp=None, key=None, value=payload, headers=[])
    built = bytearray(builder.build())
    built[0:8] = offset.to_bytes(8, "big")
    return bytes(built)


def timed(run: Callable[[], None], count: int, repeat: int) -> float:
    """Median CPU microseconds per canary of ``run``, which handles ``count`` canaries."""
    spent = []
    for _ in range(repeat):
        started = time.process_time()
        run()
        spent.append((time.process_time() - started) / count * 1e6)
    return statistics.median(spent)


def parts(
    made: list[Canary], payloads: list[bytes], p: int
) -> list[tuple[str, Callable[[], None], int]]:
    """Each part's name, a run of it over every canary, and how many runs to take."""
    n = len(made)

    def sign() -> None:
        for c in made:
            encode(c, RING)

    def produce_span() -> None:
        for c in made:
            with tracing.produce_span(
                system="kafka", destination=TOPIC, partition=c.partition,
                target="kafka", probe_id=OWN.probe_id, seq=c.seq,
            ) as span:  # fmt: skip
                span.acked(1)

    def verify() -> None:
        for payload in payloads:
            classify(payload, RING, OWN.probe_id, OWN.incarnation, max_size=1_048_576)

    def judge() -> None:
        fresh = Judge(JudgePolicy(freshness_ns=5 * SECOND, loss_timeout_ns=60 * SECOND), own=OWN)
        for c in made:
            fresh.on_acked(c, c.produced_ns + 1000)
            fresh.on_arrived(c, c.produced_ns + 2000)

    stage, metrics = stage_with_metrics()
    arrivals = [
        Arrival(c.partition, payload, c.produced_ns + 2000, c.seq, c.trace_context)
        for c, payload in zip(made, payloads, strict=True)
    ]

    def acknowledge() -> None:
        for c in made:
            stage.on_acked(c, c.produced_ns + 1000, c.partition % 3)
            metrics.acked("kafka", 0.001)

    def arrive() -> None:
        for arrival in arrivals:
            stage.on_arrival(arrival)

    fates = []
    other = Judge(JudgePolicy(freshness_ns=5 * SECOND, loss_timeout_ns=60 * SECOND), own=OWN)
    for c in made:
        other.on_acked(c, c.produced_ns + 1000)
        fates.extend(other.on_arrived(c, c.produced_ns + 2000))

    def count() -> None:
        metrics.count("kafka", "consumer", fates)

    rounds = [[batch_bytes(payloads[i + k], i // p) for k in range(p)] for i in range(0, n, p)]

    def produce_request() -> None:
        for batches in rounds:
            topics = [(TOPIC, list(enumerate(batches)))]
            ProduceRequest_v7(None, -1, 10_000, topics).encode()

    responses = [
        FetchResponse_v4(
            0, [(TOPIC, [(k, 0, seq + 1, seq + 1, [], b) for k, b in enumerate(batches)])]
        ).encode()
        for seq, batches in enumerate(rounds)
    ]

    def fetch_response() -> None:
        for raw in responses:
            for _topic, partitions in FetchResponse_v4.decode(raw).topics:
                for *_, data in partitions:
                    records = MemoryRecords(data)
                    while (batch := records.next_batch()) is not None:
                        for record in batch:
                            record.value  # noqa: B018 - read out, as the consumer does

    # Stateful parts (a canary acknowledged and arrived once) run once.
    return [
        ("sign (encode + HMAC)", sign, 0),
        ("produce span (ids only)", produce_span, 0),
        ("acknowledge (stage + producer metric)", acknowledge, 1),
        ("produce request encode (aiokafka)", produce_request, 0),
        ("fetch response decode (aiokafka)", fetch_response, 0),
        ("arrival (stage.on_arrival, all below)", arrive, 1),
        ("  verify (decode + HMAC)", verify, 0),
        ("  judge (acked + arrived)", judge, 0),
        ("  metrics (a delivered fate counted)", count, 0),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--canaries", type=int, default=30_000)
    parser.add_argument("--partitions", type=int, default=10, help="per round and request")
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    # As the services do: spans built only when OTEL_TRACES_EXPORTER exports them.
    tracing.install_tracer_provider(OWN.probe_id, ["kafka"], environ={})
    p = options.partitions
    made = canaries(options.canaries // p, p)
    payloads = [encode(c, RING) for c in made]
    print(
        f"{len(made)} canaries, rounds of {p} partitions, median of {options.repeat} runs, "
        "CPU µs per canary"
    )
    for name, run, runs in parts(made, payloads, p):
        print(f"{name:<40} {timed(run, len(made), runs or options.repeat):7.2f} µs")


if __name__ == "__main__":
    main()

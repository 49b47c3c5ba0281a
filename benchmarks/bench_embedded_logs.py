"""What the embedded broker's requests cost as its logs grow.

Run: ``python benchmarks/bench_embedded_logs.py [--partitions 2000]
[--records 1,10,30,60,100] [--repeats 5]``

The embedded broker (``once --embedded``'s, and the suite's) keeps every record, in
memory, with no retention. One broker, one topic of ``--partitions`` partitions, filled
a round at a time (one 300-byte record to every partition, as the probe writes its
canaries) up to each count of ``--records`` per partition. At each, the broker's own
CPU-seconds (from /proc) for:

* listing every partition's end offset, as the sink's driver plans each batch
  (``TopicOffsets.ends``: ListOffsets);
* reading each partition's last record, as the sink's executors and the consumer stage
  do every round (``read_ranges``: fetches);
* one more round of writes (a record to each partition).

Medians of ``--repeats``. The figures grow with the records a partition holds: a probe
left running on this broker at thousands of partitions slows it down every minute.
Figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable

from bench_sink_source import _cpu_seconds
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from probe.core.offset_ranges import OffsetRange
from probe.embedded import EmbeddedBroker
from probe.spark.kafka_reads import read_ranges
from probe.spark.topic_offsets import TopicOffsets

TOPIC = "bench-embedded-logs"
RECORD = b"x" * 300


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument(
        "--records",
        type=lambda text: [int(r) for r in text.split(",")],
        default=[1, 10, 30, 60, 100],
    )
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(
        f"bench_embedded_logs: python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"{args.partitions:,} partitions; the broker's CPU-seconds, medians of {args.repeats}"
    )
    with EmbeddedBroker() as broker:
        assert broker.pid is not None
        pid, servers = broker.pid, broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": servers})
        admin.create_topics([NewTopic(TOPIC, args.partitions, 1)])[TOPIC].result(120)
        producer = Producer({"bootstrap.servers": servers, "linger.ms": 20})
        options = {"topic": TOPIC, "bootstrap.servers": servers}
        offsets = TopicOffsets(options)
        partitions = list(range(args.partitions))

        def write_round() -> None:
            for partition in partitions:
                producer.produce(TOPIC, RECORD, partition=partition)
                producer.poll(0)
            producer.flush(120)

        def broker_cost(call: Callable[[], object]) -> float:
            costs = []
            for _ in range(args.repeats):
                before = _cpu_seconds(pid)
                call()
                costs.append(_cpu_seconds(pid) - before)
            return statistics.median(costs)

        # Until the topic's partitions all have a leader, writes to it wait.
        deadline = time.monotonic() + 60
        while len(offsets.ends(partitions)) < args.partitions and time.monotonic() < deadline:
            time.sleep(0.5)
        written = 0
        print("  records a partition | list every end | read each last record | a round of writes")
        for count in args.records:
            while written < count:
                write_round()
                written += 1
            last = [OffsetRange(TOPIC, p, written - 1, written) for p in partitions]

            def read_last(last: list[OffsetRange] = last) -> int:
                return sum(batch.num_rows for batch in read_ranges(options, last, 60))

            listing = broker_cost(lambda: offsets.ends(partitions))
            reading = broker_cost(read_last)
            before = _cpu_seconds(pid)
            write_round()
            written += 1
            writing = _cpu_seconds(pid) - before
            print(f"  {count:>19,} | {listing:13.2f}s | {reading:20.2f}s | {writing:16.2f}s")
        offsets.close()


if __name__ == "__main__":
    main()

"""Probe cost at scale on Kafka: 100, 1,000 and 10,000 partitions.

Run: ``python benchmarks/bench_scale.py [--case PARTITIONS:INTERVAL ...] [--intervals K]
[--broker embedded|apache-kafka]``

Default cases: 100 partitions every 20 s, 1,000 every 2 s and 10,000 every 20 s (the
last two are both 500 canaries/s). Each case gets a fresh broker (a broker's
metadata of earlier cases' topics would be decoded by every client at start) and
its topic created beforehand: the embedded broker (one node, replication factor 1),
or Apache Kafka's three-node KRaft cluster of ``make kafka`` (replication factor 3,
min ISR 2, acks=all: 30,000 replicas at 10,000 partitions, whose broker CPU is the
three JVMs'). Two things run on it, one after the other:

* the probe: ``sla-probe run`` as its own process, the real service (paced rounds,
  the consumer stage, judge, traces, metrics, HTTP server);
* a bare client: plain aiokafka in its own process, one record to every partition
  per interval paced the same way, read back by a consumer assigned every
  partition: what a probe costs that does nothing but produce and consume.

After the first round is delivered (connections, imports and first allocations are
not the steady state), each is measured over whole intervals from /proc: CPU
seconds (user + system) over wall seconds as a share of one core, CPU per canary
(CPU seconds over the canaries the window's rate sends: partitions x wall / interval),
resident memory at most, and the broker's CPU beside it (so the probe's cost and
the broker's are told apart). For the probe: canaries by outcome (the delivered
share), p50 and p99 end-to-end latency read off its histogram (interpolated within
the bucket, as histogram_quantile does), and /metrics scraped every 15 s (median
body size and time). For the bare client: exact p50 and p99 from its own timestamps.
A peer can be measured beside them, on a fresh broker of its own, the same way from
/proc (``--beside COMMAND``, for example KMinion's end-to-end monitor, which you fetch,
build and configure yourself: nothing of another project is kept here). The command
runs through the shell with ``BENCH_BOOTSTRAP_SERVERS``, ``BENCH_PARTITIONS`` and
``BENCH_INTERVAL_S`` in its environment; its CPU per canary divides by the same rate
(partitions x wall / interval), so it must send one canary per partition an interval.
Its latency and outcomes are its own to report (its metrics), not read here.

Figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from probe.apache_kafka.cluster import KafkaCluster
from probe.core.fetch_wait import LONG, SHORT
from probe.embedded import EmbeddedBroker, free_loopback_port
from probe.stages.producer import burst_size
from probe.transport.kafka_admin import PARTITIONS_PER_REQUEST, grow

SLA_PROBE = Path(sys.executable).with_name("sla-probe")
TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
TOPIC = "bench-scale"
SCRAPE_EVERY = 15.0  # seconds, as a Prometheus would
RATE = 1000.0  # canaries/s: the probe's default kafka.max_send_rate, for the bare client too
# A peer's start-up (topic checks, group joins) before its steady state is measured.
BESIDE_WARMUP_S = 20.0


def cpu_seconds(pid: int) -> float:
    # Fields 14 and 15 of /proc/PID/stat: user and system time in clock ticks. The
    # command name (field 2) may hold spaces, so count from its closing parenthesis.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


@dataclass(frozen=True)
class Broker:
    """The broker of one case: where clients connect, its processes, its replication."""

    bootstrap_servers: str
    pids: tuple[int, ...]
    replication: int
    # Apache Kafka's controller creates at most PARTITIONS_PER_REQUEST at once; the
    # embedded broker creates any number, and cannot add partitions later.
    apache_kafka: bool = False


@contextlib.contextmanager
def fresh_broker(kind: str) -> Iterator[Broker]:
    if kind == "embedded":
        with EmbeddedBroker() as embedded:
            assert embedded.pid is not None, "the broker runs"
            yield Broker(embedded.bootstrap_servers, (embedded.pid,), 1)
        return
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-scale-")))
        cluster = stack.enter_context(KafkaCluster(workdir=workdir, quick_start=False))
        pids = [cluster.node(n).pid for n in (1, 2, 3)]
        yield Broker(
            cluster.bootstrap_servers, tuple(p for p in pids if p is not None), 3, apache_kafka=True
        )


def broker_cpu_seconds(broker: Broker) -> float:
    return sum(cpu_seconds(pid) for pid in broker.pids)


def rss_mib(pid: int) -> float:
    resident_pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return resident_pages * PAGE_KIB / 1024


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


# The series the benchmark reads. A 10,000-partition scrape is a megabyte: parsing all
# of it with prometheus_client's parser, twice a second, would cost the benchmark (and
# the probe, on a shared machine) more than the probe spends serving it.
WANTED = (
    "synthetic_sla_canaries_total{",
    "synthetic_sla_e2e_latency_seconds_bucket{",
    "synthetic_sla_pending_canaries{",
    # bench_tiered's: the tiered reads and their first record.
    "synthetic_sla_tiered_reads_total{",
    "synthetic_sla_tiered_first_record_seconds_bucket{",
)
SAMPLE = re.compile(r"(\w+)\{(.*)\} (\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(port: int) -> tuple[Samples, int, float]:
    started = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
        body = reply.read()
    took = time.monotonic() - started
    samples: Samples = {}
    for line in body.decode().splitlines():
        if line.startswith(WANTED) and (match := SAMPLE.match(line)):
            name, labels, value = match.groups()
            samples[(name, frozenset(LABEL.findall(labels)))] = float(value)
    return samples, len(body), took


def total(samples: Samples, name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """histogram_quantile over (upper bound, cumulative count) pairs, sorted."""
    count = buckets[-1][1]
    if count == 0:
        return float("nan")
    rank = q * count
    lower, below = 0.0, 0.0
    for bound, cumulative in buckets:
        if cumulative >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(cumulative - below, 1e-9)
        lower, below = bound, cumulative
    return lower


def latency_buckets(
    before: Samples,
    after: Samples,
    stage: str | None = "consumer",
    histogram: str = "synthetic_sla_e2e_latency_seconds",
) -> list[tuple[float, float]]:
    """A histogram between two scrapes, the stage's (None: a histogram without stages,
    as the tiered reads' first-record one): (upper bound, cumulative)."""
    bucket = f"{histogram}_bucket"
    of_stage = {} if stage is None else {"stage": stage}
    bounds = sorted(
        {
            float(dict(ls)["le"])
            for (n, ls) in after
            if n == bucket and set(of_stage.items()) <= set(ls)
        }
    )

    def at(samples: Samples, bound: float) -> float:
        le = "+Inf" if bound == float("inf") else repr(bound)
        return total(samples, bucket, le=le, **of_stage)

    return [(b, at(after, b) - at(before, b)) for b in bounds]


def create_topic(broker: Broker, partitions: int) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: PLC0415

    async def create() -> None:
        admin = AIOKafkaAdminClient(
            bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=120_000
        )
        await admin.start()
        first = min(partitions, PARTITIONS_PER_REQUEST) if broker.apache_kafka else partitions
        try:
            response = await admin.create_topics([NewTopic(TOPIC, first, broker.replication)])
            assert not any(code for _, code, *_ in response.topic_errors), response
            await grow(admin, TOPIC, first, partitions)
        finally:
            await admin.close()

    asyncio.run(create())


def wait_until(condition: object, timeout: float, what: str) -> None:
    # Every look is a scrape, a megabyte at 10,000 partitions: not too often.
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(2.0)


def wait_first_round(port: int, partitions: int, interval: float, log: Path) -> None:
    def delivered() -> float:
        try:
            samples = scrape(port)[0]
        except OSError:
            return 0.0
        return total(samples, "synthetic_sla_canaries_total", outcome="delivered")

    try:
        # A fresh cluster may still be electing leaders for a large topic.
        wait_until(lambda: delivered() >= partitions, 3 * interval + 300, "the first round")
    except SystemExit:
        print(log.read_text()[-3000:])
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10)
        except urllib.error.HTTPError as unready:
            print("readyz:", unready.read().decode()[:500])
        raise


def measure_probe(
    broker: Broker, partitions: int, interval: float, k: int, *, series: str, fetch_wait: str
) -> dict:
    port = free_loopback_port()
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as scratch:
        config = Path(scratch) / "probe.yaml"
        config.write_text(
            json.dumps(
                {
                    "kafka": {
                        "bootstrap_servers": broker.bootstrap_servers,
                        "topic": TOPIC,
                        "fetch_max_wait": fetch_wait if fetch_wait == "auto" else f"{fetch_wait}s",
                    },
                    "interval": f"{interval}s",
                    "log_level": "warning",
                    "metrics": {"partition_series": series},
                }
            )
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLA_PROBE_")}
        log = Path(scratch) / "probe.log"
        command = [str(SLA_PROBE), "run", "--config", str(config), "--allow-ephemeral-key"]
        probe = subprocess.Popen(
            [*command, "--metrics-port", str(port)], env=env, stderr=log.open("wb")
        )
        try:
            wait_first_round(port, partitions, interval, log)
            before = scrape(port)[0]
            started = time.monotonic()
            cpu0, broker0 = cpu_seconds(probe.pid), broker_cpu_seconds(broker)
            rss, sizes, times = [rss_mib(probe.pid)], [], []
            window = k * interval
            next_scrape = started + SCRAPE_EVERY
            while (now := time.monotonic()) - started < window:
                if now >= next_scrape:
                    _, size, took = scrape(port)
                    sizes.append(size)
                    times.append(took)
                    next_scrape += SCRAPE_EVERY
                time.sleep(1.0)
                rss.append(rss_mib(probe.pid))
            wall = time.monotonic() - started
            cpu = cpu_seconds(probe.pid) - cpu0
            broker_cpu = broker_cpu_seconds(broker) - broker0
            # Outside the window: let the last round's canaries get their fate (between
            # two paced rounds nothing is pending), or report what still is.
            settle_by = time.monotonic() + 2 * interval + 70
            while (
                pending := total(after := scrape(port)[0], "synthetic_sla_pending_canaries")
            ) > 0:
                if time.monotonic() > settle_by:
                    break
                time.sleep(2.0)
        finally:
            probe.terminate()
            probe.wait(60)  # a 10,000-partition probe drains its last round first
        tail = log.read_text()[-1500:]

    def delta(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    outcomes = {
        o: int(delta("synthetic_sla_canaries_total", stage="consumer", outcome=o))
        for o in ("delivered", "late", "lost", "produce_failed")
    }
    canaries = max(1, sum(outcomes.values()))
    buckets = latency_buckets(before, after)
    return {
        "side": "probe",
        "wall": wall,
        "core": cpu / wall,
        # Per canary of the window's rate, so both sides divide by the same number.
        "ms_per_canary": 1e3 * cpu / (wall * partitions / interval),
        "rss": max(rss),
        "broker_core": broker_cpu / wall,
        "delivered_share": outcomes["delivered"] / canaries,
        "outcomes": outcomes,
        "p50_ms": 1e3 * quantile(0.5, buckets),
        "p99_ms": 1e3 * quantile(0.99, buckets),
        "pending": int(pending),
        "scrape_kb": statistics.median(sizes) / 1e3 if sizes else float("nan"),
        "scrape_ms": 1e3 * statistics.median(times) if times else float("nan"),
        "log": tail,
    }


async def bare_client(
    servers: str, partitions: int, interval: float, seconds: float, fetch_wait: float
) -> None:
    """The bare side, in its own process: prints its latencies as JSON at the end."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: PLC0415

    producer = AIOKafkaProducer(bootstrap_servers=servers, acks="all", linger_ms=0)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=servers,
        group_id=None,
        fetch_max_wait_ms=int(fetch_wait * 1000),
        enable_auto_commit=False,
    )
    await producer.start()
    await consumer.start()
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
    consumer.assign(tps)
    await consumer.seek_to_end(*tps)
    for tp in tps:
        await consumer.position(tp)
    sent: dict[bytes, int] = {}
    latencies: list[float] = []

    async def read() -> None:
        while True:
            batch = await consumer.getmany(timeout_ms=1000)
            at_ns = time.time_ns()
            for records in batch.values():
                for record in records:
                    produced = sent.pop(record.value or b"", None)
                    if produced is not None:
                        latencies.append((at_ns - produced) / 1e6)

    reader = asyncio.create_task(read())
    loop = asyncio.get_running_loop()
    spacing = min(1 / RATE, 0.8 * interval / partitions)
    burst = burst_size(spacing, None)  # as the probe's paced rounds
    rounds = 0
    began = loop.time()
    print("ready", flush=True)
    while loop.time() - began < seconds:
        start = began + rounds * interval
        await asyncio.sleep(max(0.0, start - loop.time()))
        for first in range(0, partitions, burst):
            await asyncio.sleep(max(0.0, start + first * spacing - loop.time()))
            for p in range(first, min(partitions, first + burst)):
                value = f"{rounds}-{p}".encode()
                sent[value] = time.time_ns()
                await producer.send(TOPIC, value, partition=p)
        rounds += 1
    await asyncio.sleep(5)
    reader.cancel()
    await producer.stop()
    await consumer.stop()
    latencies.sort()
    print(json.dumps({"latencies_ms": latencies, "sent": rounds * partitions}), flush=True)


def measure_bare(
    broker: Broker, partitions: int, interval: float, k: int, fetch_wait: float
) -> dict:
    seconds = (k + 1) * interval
    command = [sys.executable, __file__, "--bare", broker.bootstrap_servers]
    bare = subprocess.Popen(
        [*command, str(partitions), str(interval), str(seconds), str(fetch_wait)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert bare.stdout is not None
    bare.stdout.readline()  # "ready": connected and positioned
    time.sleep(interval)  # the first round, as for the probe
    row = measure_process("bare", bare.pid, broker, partitions / interval, k * interval)
    result = json.loads(bare.stdout.read().strip().splitlines()[-1])
    bare.wait(30)
    latencies = result["latencies_ms"]
    return {
        **row,
        "delivered_share": len(latencies) / result["sent"],
        "p50_ms": latencies[len(latencies) // 2] if latencies else float("nan"),
        "p99_ms": latencies[int(len(latencies) * 0.99)] if latencies else float("nan"),
    }


def measure_beside(command: str, broker: Broker, partitions: int, interval: float, k: int) -> dict:
    """A peer's process measured like the probe (the shell ``exec``s the command, so
    its pid is the peer's), after its start-up (BESIDE_WARMUP_S) and one interval."""
    env = {
        **os.environ,
        "BENCH_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
        "BENCH_PARTITIONS": str(partitions),
        "BENCH_INTERVAL_S": f"{interval:g}",
    }
    with tempfile.TemporaryFile() as log:
        peer = subprocess.Popen(
            ["/bin/sh", "-c", f"exec {command}"], env=env, stdout=log, stderr=log
        )
        try:
            time.sleep(BESIDE_WARMUP_S + interval)
            if peer.poll() is not None:
                log.seek(0)
                raise SystemExit(f"--beside exited {peer.returncode}: {log.read()[-1500:]!r}")
            row = measure_process("peer", peer.pid, broker, partitions / interval, k * interval)
        finally:
            peer.terminate()
            peer.wait(30)
    nan = float("nan")
    return {**row, "delivered_share": nan, "p50_ms": nan, "p99_ms": nan}


def measure_process(side: str, pid: int, broker: Broker, rate: float, window: float) -> dict:
    """A client process's CPU (as a share of a core, and per canary at ``rate`` a
    second), its resident memory at most, and the broker's CPU, over ``window`` s."""
    started = time.monotonic()
    cpu0, broker0 = cpu_seconds(pid), broker_cpu_seconds(broker)
    rss = [rss_mib(pid)]
    while time.monotonic() - started < window:
        time.sleep(0.5)
        rss.append(rss_mib(pid))
    wall = time.monotonic() - started
    cpu, broker_cpu = cpu_seconds(pid) - cpu0, broker_cpu_seconds(broker) - broker0
    return {
        "side": side,
        "wall": wall,
        "core": cpu / wall,
        "ms_per_canary": 1e3 * cpu / (wall * rate),
        "rss": max(rss),
        "broker_core": broker_cpu / wall,
    }


def show(partitions: int, interval: float, row: dict) -> None:
    scrape_text = ""
    if "scrape_kb" in row:
        scrape_text = f"  scrape {row['scrape_kb']:7.0f} kB {row['scrape_ms']:5.0f} ms"
        if row["pending"]:
            scrape_text += f"  ({row['pending']} still pending)"
    print(
        f"{partitions:>6} @ {interval:>4g}s {row['side']:>5}: {row['core']:5.3f} core "
        f"{row['ms_per_canary']:6.3f} ms/canary  RSS {row['rss']:5.0f} MiB  "
        f"broker {row['broker_core']:5.3f} core  delivered {100 * row['delivered_share']:5.1f} %  "
        f"p50 {row['p50_ms']:6.1f} ms  p99 {row['p99_ms']:6.1f} ms{scrape_text}",
        flush=True,
    )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--bare":
        servers, partitions, interval, seconds, wait = sys.argv[2:7]
        asyncio.run(
            bare_client(servers, int(partitions), float(interval), float(seconds), float(wait))
        )
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--case",
        action="append",
        help="PARTITIONS:INTERVAL_S (default 100:20, 1000:2, 10000:20)",
    )
    parser.add_argument("--intervals", type=int, default=3, help="whole intervals measured")
    parser.add_argument("--min-window", type=float, default=40.0, help="seconds measured at least")
    parser.add_argument("--no-bare", action="store_true", help="only the probe")
    parser.add_argument("--broker", choices=["embedded", "apache-kafka"], default="embedded")
    parser.add_argument(
        "--partition-series", default="all", choices=("all", "stale", "none"), help="probe setting"
    )
    parser.add_argument(
        "--fetch-max-wait",
        default="auto",
        metavar="SECONDS",
        help="the probe's kafka.fetch_max_wait and the bare consumer's (default auto: the "
        "probe decides; the bare consumer waits what the probe settles at on that broker, "
        "1 s on Apache Kafka, 0.1 s on the embedded one)",
    )
    parser.add_argument(
        "--beside",
        metavar="COMMAND",
        help="a peer measured beside, on its own fresh broker (see the module's doc)",
    )
    options = parser.parse_args()
    cases = [tuple(c.split(":")) for c in options.case or ["100:20", "1000:2", "10000:20"]]
    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}; {options.broker} broker; probe defaults "
        f"(kafka.max_send_rate {RATE:g}/s), metrics.partition_series {options.partition_series}, "
        f"fetch max wait {options.fetch_max_wait}"
    )
    bare_wait = (
        float(options.fetch_max_wait)
        if options.fetch_max_wait != "auto"
        else (LONG if options.broker == "apache-kafka" else SHORT)
    )
    for count_text, interval_text in cases:
        partitions, interval = int(count_text), float(interval_text)
        k = max(options.intervals, int(-(-options.min_window // interval)))
        with fresh_broker(options.broker) as broker:
            create_topic(broker, partitions)
            row = measure_probe(
                broker,
                partitions,
                interval,
                k,
                series=options.partition_series,
                fetch_wait=options.fetch_max_wait,
            )
            show(partitions, interval, row)
            if row["delivered_share"] < 1:
                print("  not every canary delivered; the probe's log:\n" + row["log"])
        if not options.no_bare:
            with fresh_broker(options.broker) as broker:
                create_topic(broker, partitions)
                bare = measure_bare(broker, partitions, interval, k, bare_wait)
                show(partitions, interval, bare)
        if options.beside:
            with fresh_broker(options.broker) as broker:
                row = measure_beside(options.beside, broker, partitions, interval, k)
                show(partitions, interval, row)


if __name__ == "__main__":
    main()

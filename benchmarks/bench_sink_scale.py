"""The sink stage at scale beside the consumer stage: 1,000 and 10,000 partitions at 20 s.

Run: ``python benchmarks/bench_sink_scale.py [--broker embedded|apache-kafka]
[--replication N] [--partitions 1000,10000] [--window SECONDS] [--interval 20]
[--warm-up SECONDS] [--scrape-every SECONDS] [--log-level debug] [--keep DIR]
[--config FILE]`` (needs
pyspark; ``--broker apache-kafka`` needs ``make kafka``; ``--config``: a configuration
file for the probe, sink.trigger say).

Each case is what a user runs: ``sla-probe run --stages consumer,sink`` as its own
process (``--bootstrap-servers``, ``--topic``, ``--interval``, ``--sink-path`` in a
scratch directory, ``--spark-log``, ``--metrics-port``, an ephemeral key), on a fresh
broker (the embedded one, or Apache Kafka's three-node cluster of ``make kafka``:
replication factor 3, or ``--replication``) whose topic of that many partitions is
created beforehand (bench_sink_source.create_topic), so the probe's start does not pay
for it. The window (``--window``, 600 s) begins ``--warm-up`` seconds (one interval) after the
sink's first verdict: Spark's start, its Python workers' and the first batches' are
not the steady state. Its /metrics is scraped every ``--scrape-every`` seconds (the
series below only, parsed with prometheus_client's parser) and the process tree
sampled from /proc. Printed per case:

* canaries per outcome per stage over the window (counter deltas), and sink over
  consumer delivered: 1.00 when the sink keeps pace (the edges of the window hold
  canaries the consumer judged and the sink not yet, a share that shrinks as the
  window grows). ``behind`` is the canaries the consumer judged since the probe
  started and the sink not, at the window's end (below zero when the sink has judged
  canaries the consumer has not yet), beside the sink's own
  ``synthetic_sla_spark_source_lag_records``;
* p50 and p99 produce→verdict latency per stage, read off the deltas of
  ``synthetic_sla_e2e_latency_seconds`` over the window (interpolated within the
  bucket, as histogram_quantile does: bench_scale.quantile; ``>60s`` when past the
  last finite bucket);
* the sink query's batches (``synthetic_sla_spark_batch_duration_seconds``): how
  many in the window, their p50 and p99 (from the buckets), mean and the longest
  mean of one scrape interval (one batch, when batches are a scrape apart or more),
  batches over the trigger; records per batch as sink fates judged per batch (the
  probe exports no input-row count: a canary is one record and one fate), over all
  the window's batches (the query runs one every trigger, most of them empty between
  rounds) and the median and largest of the scrape intervals that judged any;
* the sink query's restarts by reason and whether it was given up;
* CPU-seconds per round and cores of the probe's process tree (the probe, Spark's
  JVM, its Python workers; the broker and this benchmark apart:
  bench_sink_source.tree_cpu less this process), over the window, and its split:
  Spark's JVM and Python workers, and the probe's own process (its stages, the
  sink's driver side in Python: foreachBatch, progress). A worker that
  exits inside the window takes its CPU with it (counted only in its parent's
  cutime once reaped): the figure is a floor. Then the probe's main thread (its
  event loop: the producer and consumer stages) apart from the rest of the tree, the
  sink's share; and the broker's CPU (every broker process), beside the tree's;
* per minute of the window: each stage's fates, and the cores of the probe's tree
  and of the broker: where a run that falls behind began to, and whose CPU grew;
* peak RSS of that tree (VmRSS summed over its processes, each sample);
* bytes of the sink's checkpoint (``<sink path>/_checkpoint``) and of its tables at
  the window's start and end, the checkpoint's growth per hour extrapolated;
* the count of ERROR / Traceback lines in the probe's log and Spark's, and the first
  few distinct ones.

A case that fails (no first verdict in time, the probe gone) is reported with its
log's tail and the next case runs; the probe's process group is killed at the case's
end whatever happened. Figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench_scale import quantile
from bench_sink_source import _children, _cpu_seconds, brokers, create_topic, tree_cpu
from prometheus_client.parser import text_string_to_metric_families

from probe.embedded import free_loopback_port

SLA_PROBE = Path(sys.executable).with_name("sla-probe")
TOPIC = "bench-sink-scale"
STAGES = ("consumer", "sink")
OUTCOMES = ("delivered", "late", "lost", "produce_failed")
TRIGGER_S = 2.0  # the sink's default trigger (probe.config)
# Only these families are parsed: a 10,000-partition scrape is a megabyte of mostly
# per-partition series, and parsing all of it every few seconds would load the
# machine the probe is measured on.
WANTED = (
    "synthetic_sla_canaries",
    "synthetic_sla_e2e_latency_seconds",
    "synthetic_sla_spark_",
)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as reply:
        body = reply.read().decode()
    kept = []
    for line in body.splitlines():
        name = [*line.split(" ", 3), "", ""][2] if line.startswith("# ") else line
        if name.startswith(WANTED):
            kept.append(line)
    samples: Samples = {}
    for family in text_string_to_metric_families("\n".join(kept) + "\n"):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def total(samples: Samples, name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def grown(before: Samples, after: Samples, name: str, **labels: str) -> float:
    """How much a counter grew between two scrapes."""
    return total(after, name, **labels) - total(before, name, **labels)


def buckets(before: Samples, after: Samples, name: str, **labels: str) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of a histogram's growth between two scrapes."""
    wanted = set(labels.items())
    bounds = {
        dict(ls)["le"] for (n, ls) in after if n == f"{name}_bucket" and wanted <= ls
    }  # the bounds as the exposition spells them
    pairs = [
        (
            float(le),
            total(after, f"{name}_bucket", le=le, **labels)
            - total(before, f"{name}_bucket", le=le, **labels),
        )
        for le in bounds
    ]
    return sorted(pairs)


def at(q: float, histogram: list[tuple[float, float]]) -> str:
    """The quantile in seconds; past the last finite bucket, only that it is past it
    (histogram_quantile would answer the bound itself)."""
    if not histogram or histogram[-1][1] == 0:
        return "   n/a"
    finite = [(bound, count) for bound, count in histogram if bound != float("inf")]
    if finite and finite[-1][1] < q * histogram[-1][1]:
        return f">{finite[-1][0]:g}s"
    return f"{quantile(q, histogram):6.2f}s"


def tree_pids(root: int) -> list[int]:
    pids, stack = [], [root]
    while stack:
        pid = stack.pop()
        pids.append(pid)
        stack.extend(_children(pid))
    return pids


def tree_rss_mib(root: int) -> float:
    kib = 0
    for pid in tree_pids(root):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    kib += int(line.split()[1])
    return kib / 1024


def main_thread_cpu(pid: int) -> float:
    return _cpu_seconds(pid, thread=pid)


def broker_cpu(broker_pids: set[int]) -> float:
    return sum(_cpu_seconds(pid) for pid in broker_pids)


def probe_cpu(broker_pids: set[int]) -> float:
    """The probe's tree: every descendant of this process but the broker's."""
    return tree_cpu(broker_pids) - time.process_time()


def du(path: Path) -> int:
    size = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                size += (Path(dirpath) / name).stat().st_size
    return size


@dataclass
class Window:
    """What the samples of one window collected."""

    first: Samples
    last: Samples
    wall: float
    cpu: float
    own_cpu: float  # the probe's own process: its stages, Spark's driver in Python
    rss: list[float]
    scrapes: list[Samples] = field(default_factory=list)
    checkpoint: tuple[int, int] = (0, 0)
    tables: tuple[int, int] = (0, 0)
    broker_cpu: float = 0.0
    # The probe's main thread: its event loop, which runs the producer and consumer
    # stages (the sink's batches run on py4j's threads and in Spark's processes).
    loop_cpu: float = 0.0
    # (seconds into the window, probe tree CPU, broker CPU) at each scrape of scrapes.
    marks: list[tuple[float, float, float]] = field(default_factory=list)


@contextlib.contextmanager
def probe_process(
    bootstrap: str,
    port: int,
    scratch: Path,
    interval: float,
    *,
    log_level: str = "info",
    config: Path | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLA_PROBE_")}
    command = [
        str(SLA_PROBE), "run", "--stages", "consumer,sink",
        "--bootstrap-servers", bootstrap, "--topic", TOPIC,
        "--interval", f"{interval:g}s", "--sink-path", str(scratch / "sink"),
        "--spark-log", str(scratch / "spark.log"), "--metrics-port", str(port),
        "--metrics-host", "127.0.0.1", "--allow-ephemeral-key", "--log-level", log_level,
    ]  # fmt: skip
    if config is not None:
        command += ["--config", str(config)]
    with (scratch / "run.log").open("wb") as log:
        # Its own session: Spark's JVM and workers are in its group, killed with it.
        probe = subprocess.Popen(command, env=env, stderr=log, start_new_session=True)
    try:
        yield probe
    finally:
        probe.send_signal(signal.SIGTERM)
        try:
            probe.wait(120)  # a 10,000-partition round drains and the query stops first
        except subprocess.TimeoutExpired:
            print("  the probe did not stop in 120 s after SIGTERM: killed")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(probe.pid, signal.SIGKILL)
        probe.wait()


def wait_first_verdict(probe: subprocess.Popen[bytes], port: int, timeout: float) -> float:
    """Seconds from the probe's start until the sink judged its first canary."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if probe.poll() is not None:
            raise RuntimeError(f"the probe exited with {probe.returncode}")
        with contextlib.suppress(OSError):
            if total(scrape(port), "synthetic_sla_canaries_total", stage="sink") > 0:
                return time.monotonic() - started
        time.sleep(3.0)
    raise TimeoutError(f"no sink verdict within {timeout:.0f}s")


def measure(
    probe: subprocess.Popen[bytes],
    port: int,
    sink_path: Path,
    broker_pids: set[int],
    args: argparse.Namespace,
) -> Window:
    checkpoint = sink_path / "_checkpoint"
    first = scrape(port)
    checkpoint0, tables0 = du(checkpoint), du(sink_path) - du(checkpoint)
    cpu0, started = probe_cpu(broker_pids), time.monotonic()
    own0, broker0 = _cpu_seconds(probe.pid), broker_cpu(broker_pids)
    loop0 = main_thread_cpu(probe.pid)
    rss, scrapes = [tree_rss_mib(probe.pid)], [first]
    marks = [(0.0, cpu0, broker0)]
    next_scrape = started + args.scrape_every
    while (now := time.monotonic()) - started < args.window:
        if probe.poll() is not None:
            raise RuntimeError(f"the probe exited with {probe.returncode} inside the window")
        if now >= next_scrape:
            scrapes.append(scrape(port))
            marks.append((now - started, probe_cpu(broker_pids), broker_cpu(broker_pids)))
            next_scrape += args.scrape_every
        rss.append(tree_rss_mib(probe.pid))
        time.sleep(1.0)
    cpu, wall = probe_cpu(broker_pids) - cpu0, time.monotonic() - started
    own = _cpu_seconds(probe.pid) - own0
    brokers_cpu = broker_cpu(broker_pids) - broker0
    loop = main_thread_cpu(probe.pid) - loop0
    last = scrape(port)
    scrapes.append(last)
    marks.append((wall, cpu0 + cpu, broker0 + brokers_cpu))
    checkpoint1 = du(checkpoint)
    return Window(
        first,
        last,
        wall,
        cpu,
        own,
        rss,
        scrapes,
        (checkpoint0, checkpoint1),
        (tables0, du(sink_path) - checkpoint1),
        brokers_cpu,
        loop,
        marks,
    )


def log_errors(*logs: Path, shown: int = 5) -> str:
    lines: list[str] = []
    for log in logs:
        with contextlib.suppress(OSError):
            lines += [
                f"{log.name}: {line.strip()[:200]}"
                for line in log.read_text(errors="replace").splitlines()
                if "ERROR" in line or "Traceback" in line or "Error:" in line
            ]
    distinct = list(dict.fromkeys(lines))
    return f"{len(lines)} error lines" + "".join(f"\n      {line}" for line in distinct[:shown])


def report(window: Window, partitions: int, interval: float) -> None:
    first, last = window.first, window.last

    def delta(name: str, **labels: str) -> float:
        return grown(first, last, name, **labels)

    rounds = window.wall / interval
    print(f"  window {window.wall:.0f}s ({rounds:.1f} rounds, {partitions * rounds:,.0f} canaries)")
    fates: dict[str, dict[str, int]] = {}
    for stage in STAGES:
        fates[stage] = {
            o: int(delta("synthetic_sla_canaries_total", stage=stage, outcome=o)) for o in OUTCOMES
        }
        latency = buckets(first, last, "synthetic_sla_e2e_latency_seconds", stage=stage)
        print(f"  {stage:8}  {fates[stage]}  p50 {at(0.5, latency)}  p99 {at(0.99, latency)}")
    consumer = fates["consumer"]["delivered"]
    behind = total(last, "synthetic_sla_canaries_total", stage="consumer") - total(
        last, "synthetic_sla_canaries_total", stage="sink"
    )
    lag = total(last, "synthetic_sla_spark_source_lag_records")
    print(
        f"  sink/consumer delivered {fates['sink']['delivered'] / max(consumer, 1):.3f}  "
        f"behind {behind:,.0f} canaries at the end, source lag {lag:,.0f} records"
    )

    name = "synthetic_sla_spark_batch_duration_seconds"
    batches = delta(f"{name}_count")
    durations = buckets(first, last, name)
    per_scrape = []  # (batches, mean duration, fates per batch) of each scrape interval
    for before, after in zip(window.scrapes, window.scrapes[1:], strict=False):
        count = total(after, f"{name}_count") - total(before, f"{name}_count")
        if count:
            seconds = total(after, f"{name}_sum") - total(before, f"{name}_sum")
            judged = total(after, "synthetic_sla_canaries_total", stage="sink") - total(
                before, "synthetic_sla_canaries_total", stage="sink"
            )
            per_scrape.append((count, seconds / count, judged / count))
    sink_fates = sum(fates["sink"].values())
    print(
        f"  batches {batches:.0f} ({batches / max(rounds, 1e-9):.1f} a round, "
        f"{delta('synthetic_sla_spark_trigger_overruns_total'):.0f} over the {TRIGGER_S:g}s "
        f"trigger): p50 {at(0.5, durations)} p99 {at(0.99, durations)} "
        f"mean {delta(f'{name}_sum') / max(batches, 1):.2f}s, longest scrape-interval mean "
        f"{max((m for _, m, _ in per_scrape), default=float('nan')):.2f}s"
    )
    with_records = [f for _, _, f in per_scrape if f]
    print(
        f"  records per batch {sink_fates / max(batches, 1):,.0f} over all the window's, "
        f"median {statistics.median(with_records) if with_records else float('nan'):,.0f} "
        f"and max {max(with_records, default=float('nan')):,.0f} in scrape intervals with any"
    )
    restarts = {
        dict(ls)["reason"]: int(total(last, n, **dict(ls)) - total(first, n, **dict(ls)))
        for (n, ls) in last
        if n == "synthetic_sla_spark_query_restarts_total"
    }
    print(
        f"  sink restarts {sum(restarts.values())} in the window "
        f"{ {r: c for r, c in restarts.items() if c} }, "
        f"{total(last, 'synthetic_sla_spark_query_restarts_total'):.0f} since start; "
        f"given up {total(last, 'synthetic_sla_spark_query_failed'):.0f}, "
        f"up {total(last, 'synthetic_sla_spark_query_up'):.0f}"
    )
    spark = window.cpu - window.own_cpu
    print(
        f"  CPU {window.cpu / max(rounds, 1e-9):.1f}s a round, {window.cpu / window.wall:.2f} "
        f"cores (probe tree, broker apart: Spark's JVM and Python workers "
        f"{spark / window.wall:.2f}, the probe's own process {window.own_cpu / window.wall:.2f}); "
        f"peak RSS {max(window.rss):,.0f} MiB; the broker {window.broker_cpu / window.wall:.2f} "
        "cores"
    )
    print(
        f"  of which the probe's event loop (producer and consumer stages) "
        f"{window.loop_cpu / window.wall:.2f} cores, and the rest, the sink's share (Spark's "
        f"processes, the batches' Python on the driver): "
        f"{(window.cpu - window.loop_cpu) / window.wall:.2f} cores"
    )
    timeline(window)
    (c0, c1), (t0, t1) = window.checkpoint, window.tables
    print(
        f"  checkpoint {c0 / 1e6:.2f} -> {c1 / 1e6:.2f} MB "
        f"({(c1 - c0) / 1e6 * 3600 / window.wall:.1f} MB an hour), "
        f"tables {t0 / 1e6:.2f} -> {t1 / 1e6:.2f} MB "
        f"({(t1 - t0) / 1e6 * 3600 / window.wall:.1f} MB an hour)"
    )


def timeline(window: Window, every: float = 60.0) -> None:
    """Per minute of the window: each stage's fates and the CPU of the probe's tree and
    of the broker. A pipeline that falls behind shows here where it began, and which
    process's CPU grew first."""
    print("  per minute: consumer delivered/late/lost, sink delivered/late/lost, cores of "
          "the probe tree and of the broker")  # fmt: skip
    marked = list(zip(window.marks, window.scrapes, strict=True))
    start = 0
    for end in range(1, len(marked)):
        (t0, cpu0, broker0), before = marked[start]
        (t1, cpu1, broker1), after = marked[end]
        if t1 - t0 < every and end < len(marked) - 1:
            continue

        name = "synthetic_sla_canaries_total"
        fates = [
            "/".join(
                f"{grown(before, after, name, stage=stage, outcome=o):.0f}"
                for o in ("delivered", "late", "lost")
            )
            for stage in STAGES
        ]
        span = max(t1 - t0, 1e-9)
        print(
            f"    {t0:4.0f}-{t1:4.0f}s  consumer {fates[0]:>17}  sink {fates[1]:>17}  "
            f"probe {(cpu1 - cpu0) / span:.2f}  broker {(broker1 - broker0) / span:.2f}"
        )
        start = end


def _setting(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not name or not equals:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VALUE")
    return name, value


def run_case(partitions: int, args: argparse.Namespace) -> None:
    with contextlib.ExitStack() as stack:
        if args.keep is None:
            scratch = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-sink-scale-"))
            )
        else:  # the logs and tables kept for a look afterwards
            scratch = args.keep / f"{args.broker}-{partitions}"
            scratch.mkdir(parents=True)
        bootstrap, broker_pids = stack.enter_context(
            brokers(args.broker, scratch, dict(args.kafka_setting))
        )
        began = time.monotonic()
        create_topic(
            bootstrap,
            TOPIC,
            partitions,
            apache_kafka=args.broker != "embedded",
            replication=args.replication,
        )
        print(f"\n== {partitions:,} partitions every {args.interval:g}s, "
              f"topic created in {time.monotonic() - began:.0f}s", flush=True)  # fmt: skip
        port = free_loopback_port()
        logs = (scratch / "run.log", scratch / "spark.log")
        try:
            with probe_process(
                bootstrap,
                port,
                scratch,
                args.interval,
                log_level=args.log_level,
                config=args.config,
            ) as probe:
                took = wait_first_verdict(probe, port, args.first_verdict_within)
                print(f"  first sink verdict {took:.0f}s after the probe's start", flush=True)
                time.sleep(args.warm_up)
                window = measure(probe, port, scratch / "sink", broker_pids, args)
        except Exception as failure:  # one case failing: say so, run the next
            print(f"  FAILED: {type(failure).__name__}: {str(failure)[:300]}")
            print("  " + log_errors(*logs))
            with contextlib.suppress(OSError):
                print("  run.log's tail:\n" + logs[0].read_text(errors="replace")[-2000:])
            return
        report(window, partitions, args.interval)
        print("  logs: " + log_errors(*logs), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--broker", choices=("embedded", "apache-kafka"), default="embedded")
    parser.add_argument(
        "--partitions", type=lambda text: [int(p) for p in text.split(",")], default=[1000, 10000]
    )
    parser.add_argument(
        "--replication", type=int, help="the topic's replication factor (Apache Kafka: 3)"
    )
    parser.add_argument("--window", type=float, default=600.0, help="seconds measured")
    parser.add_argument("--interval", type=float, default=20.0, help="the probe's --interval")
    parser.add_argument(
        "--warm-up", type=float, help="seconds after the first sink verdict (one interval)"
    )
    parser.add_argument("--scrape-every", type=float, default=5.0)
    parser.add_argument("--first-verdict-within", type=float, default=900.0)
    parser.add_argument(
        "--log-level", default="info", help="the probe's (debug: each batch's phases)"
    )
    parser.add_argument(
        "--keep", type=Path, help="a new directory to keep each case's logs and tables in"
    )
    parser.add_argument(
        "--config", type=Path, help="a configuration file for the probe (sink.trigger, ...)"
    )
    parser.add_argument(
        "--kafka-setting",
        type=_setting,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an Apache Kafka broker setting (repeat), e.g. log.index.interval.bytes=1048576",
    )
    args = parser.parse_args()
    if args.warm_up is None:
        args.warm_up = args.interval
    print(
        f"bench_sink_scale: python {platform.python_version()}, {os.cpu_count()} CPUs, load "
        f"average {os.getloadavg()[0]:.1f}; broker {args.broker}; window {args.window:g}s after "
        f"a {args.warm_up:g}s warm-up past the sink's first verdict",
        flush=True,
    )
    for partitions in args.partitions:
        run_case(partitions, args)


if __name__ == "__main__":
    main()

"""The group stages beside the consumer stage: their commits, their rebalances, their
cost, and how long their group takes to move to a new coordinator.

Run: ``python benchmarks/bench_group_stage.py [--broker apache-kafka|embedded]
[--partitions 3,1000] [--interval 20] [--window SECONDS] [--group-fetch-max-wait 0.5]``
(``apache-kafka`` needs ``make kafka``).

For each partition count, on a fresh broker with the topic created beforehand, two
runs of what a user runs, one after the other, each for the window after its first
round: ``sla-probe run --stages consumer`` (the floor: the probe without a group
stage), ``sla-probe run --stages consumer,group`` (the classic protocol) and, on
Apache Kafka, ``sla-probe run --stages consumer,group_consumer`` (the consumer
protocol, KIP-848, on librdkafka) and ``sla-probe run --stages consumer,share`` (a
share group, KIP-932, on librdkafka's share consumer: its "commits" are its
acknowledgements, one a canary) and ``sla-probe run --stages consumer,transactional``
(every canary written in transactions, read read_committed; its CPU includes the
transactional producer's). Printed per case:

* CPU-seconds a round of the probe's process, and each group run's over the consumer
  run's (the group stage's cost as a ratio, measured in one sitting), with CPU ms per
  canary read at the group stage;
* canaries per outcome at each stage, and p50/p99 produce→verdict per stage;
* the commits over the window: how many, p50/p99 latency (from the histogram's
  buckets, interpolated as histogram_quantile does), failures by reason;
* rebalances since start and their mean duration, the time to the first record after
  the last assignment.

On Apache Kafka, after the last case's window of each group stage: the group
coordinator's broker is stopped (a controlled shutdown) and the time until the member
commits through a new coordinator is printed, with the canaries lost at the stage
meanwhile; the broker is started again before the next run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import TOPIC, Broker, cpu_seconds, create_topic, quantile

from probe.apache_kafka.cluster import KafkaCluster
from probe.config.names import GROUP_STAGES
from probe.embedded import EmbeddedBroker, free_loopback_port

SLA_PROBE = Path(sys.executable).with_name("sla-probe")
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("synthetic_sla_")
        for s in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def deltas(
    before: Samples, after: Samples, histogram: str, **labels: str
) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of a histogram's buckets over the window."""
    wanted = set(labels.items())
    bounds = sorted(
        {float(dict(ls)["le"]) for (n, ls) in after if n == f"{histogram}_bucket" and wanted <= ls}
    )

    def at(samples: Samples, bound: float) -> float:
        le = "+Inf" if bound == float("inf") else str(bound)
        return total(samples, f"{histogram}_bucket", le=le, **labels)

    return [(b, at(after, b) - at(before, b)) for b in bounds]


@dataclass
class Running:
    process: subprocess.Popen[bytes]
    port: int


@contextlib.contextmanager
def probe(
    servers: str, stages: str, interval: float, log: Path, fetch_max_wait: float
) -> Iterator[Running]:
    port = free_loopback_port()
    config = log.with_suffix(".yaml")
    config.write_text(f"group:\n  fetch_max_wait: {fetch_max_wait}\n")
    command = [
        str(SLA_PROBE), "run", "--bootstrap-servers", servers, "--topic", TOPIC,
        "--no-create-topic", "--interval", f"{interval:g}s", "--stages", stages,
        "--metrics-port", str(port), "--allow-ephemeral-key", "--probe-id", "bench-group",
        "--config", str(config),
    ]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield Running(process, port)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_until(condition: object, timeout: float, what: str, every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():  # type: ignore[operator]
                return
        except OSError:
            pass  # the endpoint is not up yet
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


def measure(running: Running, stages: str, partitions: int, interval: float,
            window: float) -> dict[str, object]:  # fmt: skip
    """One window of one running probe, after its first round."""
    wait_until(
        lambda: (
            total(scrape(running.port), "synthetic_sla_canaries_total", outcome="delivered")
            >= partitions * len(stages.split(","))
        ),
        timeout=max(120.0, 4 * interval),
        what="a first round",
    )
    before, cpu_before = scrape(running.port), cpu_seconds(running.process.pid)
    started = time.monotonic()
    time.sleep(window)
    after, cpu_after = scrape(running.port), cpu_seconds(running.process.pid)
    rounds = (time.monotonic() - started) / interval
    row: dict[str, object] = {"cpu_per_round": (cpu_after - cpu_before) / rounds}
    for stage in stages.split(","):
        outcomes = {
            o: total(after, "synthetic_sla_canaries_total", stage=stage, outcome=o)
            - total(before, "synthetic_sla_canaries_total", stage=stage, outcome=o)
            for o in ("delivered", "late", "lost", "produce_failed")
        }
        buckets = deltas(before, after, "synthetic_sla_e2e_latency_seconds", stage=stage)
        row[stage] = (outcomes, quantile(0.5, buckets), quantile(0.99, buckets))
    if (group := group_stage(stages)) is not None:
        commits = deltas(before, after, "synthetic_sla_group_commit_latency_seconds", stage=group)
        failures = {
            dict(ls)["reason"]: v - before.get((n, ls), 0.0)
            for (n, ls), v in after.items()
            if n == "synthetic_sla_group_commit_failures_total"
            and dict(ls)["stage"] == group
            and v - before.get((n, ls), 0.0)
        }
        rebalances = total(after, "synthetic_sla_group_rebalances_total", stage=group)
        outcomes = row[group][0]  # type: ignore[index]
        read = outcomes["delivered"] + outcomes["late"]
        row["cpu_ms_per_canary"] = (cpu_after - cpu_before) * 1000 / max(read, 1.0)
        row["commits"] = (commits[-1][1] if commits else 0.0, quantile(0.5, commits),
                          quantile(0.99, commits), failures)  # fmt: skip
        row["rebalances"] = (
            rebalances,
            total(after, "synthetic_sla_group_rebalance_seconds_sum", stage=group)
            / max(rebalances, 1.0),
            total(after, "synthetic_sla_group_first_record_seconds", stage=group),
        )
    return row


def group_stage(stages: str) -> str | None:
    """The group stage of a run's stages (group, group_consumer or share), if any."""
    return next((s for s in stages.split(",") if s in GROUP_STAGES), None)


def coordinator(samples: Samples, stage: str) -> int | None:
    for (name, labels), value in samples.items():
        ours = name == "synthetic_sla_group_coordinator" and dict(labels)["stage"] == stage
        if ours and value == 1:
            return int(dict(labels)["broker"])
    return None


def coordinator_move(cluster: KafkaCluster, running: Running, stage: str) -> str:
    """Stop the group coordinator's broker; how long until a commit through a new one.
    The broker is started again, in sync, before this returns."""
    samples = scrape(running.port)
    moved_from = coordinator(samples, stage)
    if moved_from is None:
        return "no coordinator series: not measured"
    commits = total(samples, "synthetic_sla_group_commit_latency_seconds_count", stage=stage)
    lost = total(samples, "synthetic_sla_canaries_total", stage=stage, outcome="lost")
    stopped_at = time.monotonic()
    cluster.node(moved_from).stop()

    def committing_elsewhere() -> bool:
        now = scrape(running.port)
        return (
            coordinator(now, stage) not in (None, moved_from)
            and total(now, "synthetic_sla_group_commit_latency_seconds_count", stage=stage)
            > commits
        )

    wait_until(
        committing_elsewhere, timeout=180, what="a commit through a new coordinator", every=0.1
    )
    took = time.monotonic() - stopped_at
    lost_after = total(scrape(running.port), "synthetic_sla_canaries_total", stage=stage,
                       outcome="lost")  # fmt: skip
    moved_to = coordinator(scrape(running.port), stage)
    cluster.start_nodes(moved_from)
    cluster.wait_ready()
    return (
        f"broker {moved_from} stopped: committing through broker {moved_to} after "
        f"{took:.1f}s; {lost_after - lost:.0f} canaries lost at the {stage} stage so far"
    )


@contextlib.contextmanager
def fresh_broker(kind: str) -> Iterator[tuple[Broker, KafkaCluster | None]]:
    if kind == "embedded":
        with EmbeddedBroker() as embedded:
            assert embedded.pid is not None, "the broker runs"
            yield Broker(embedded.bootstrap_servers, (embedded.pid,), 1), None
        return
    with (
        tempfile.TemporaryDirectory(prefix="bench-group-") as workdir,
        KafkaCluster(workdir=Path(workdir), quick_start=False) as cluster,
    ):
        pids = tuple(p for n in (1, 2, 3) if (p := cluster.node(n).pid) is not None)
        yield Broker(cluster.bootstrap_servers, pids, 3), cluster


def show(stages: str, row: dict[str, object]) -> None:
    print(f"  --stages {stages}: {row['cpu_per_round']:.3f} CPU-s a round")
    for stage in stages.split(","):
        outcomes, p50, p99 = row[stage]  # type: ignore[misc]
        counts = " ".join(f"{o} {n:.0f}" for o, n in outcomes.items())
        print(f"    {stage:8} {counts}; p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms")
    if "commits" in row:
        print(f"    {row['cpu_ms_per_canary']:.2f} CPU ms per canary the group stage "
              "read (the whole process)")  # fmt: skip
        n, p50, p99, failures = row["commits"]  # type: ignore[misc]
        print(f"    commits  {n:.0f}; p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms; "
              f"failed {failures or 'none'}")  # fmt: skip
        count, mean_s, first_s = row["rebalances"]  # type: ignore[misc]
        print(f"    rebalances since start {count:.0f}, mean {mean_s:.2f} s; "
              f"first record {first_s:.2f} s after the last assignment")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", choices=("apache-kafka", "embedded"), default="apache-kafka")
    parser.add_argument("--partitions", default="3,1000")
    parser.add_argument("--interval", type=float, default=20.0)
    parser.add_argument("--window", type=float, default=120.0)
    parser.add_argument(
        "--group-fetch-max-wait", type=float, default=0.5, help="group.fetch_max_wait, seconds"
    )
    args = parser.parse_args()
    print(f"{platform.node()}: {os.cpu_count()} cores, {args.broker}, interval "
          f"{args.interval:g}s, window {args.window:g}s, group.fetch_max_wait "
          f"{args.group_fetch_max_wait:g}s")  # fmt: skip
    counts = [int(n) for n in args.partitions.split(",")]
    for partitions in counts:
        with fresh_broker(args.broker) as (broker, cluster), tempfile.TemporaryDirectory() as logs:
            create_topic(broker, partitions)
            print(f"{partitions} partitions")
            rows = {}
            runs = ["consumer", "consumer,group"]
            if cluster is not None:
                runs += ["consumer,group_consumer", "consumer,share", "consumer,transactional"]
            for stages in runs:
                log = Path(logs) / f"{stages}.log"
                with probe(
                    broker.bootstrap_servers, stages, args.interval, log, args.group_fetch_max_wait
                ) as running:
                    rows[stages] = measure(running, stages, partitions, args.interval, args.window)
                    show(stages, rows[stages])
                    group = group_stage(stages)
                    if cluster is not None and partitions == counts[-1] and group is not None:
                        print("    " + coordinator_move(cluster, running, group))
            floor = rows["consumer"]["cpu_per_round"]
            for stages in runs[1:]:
                ratio = rows[stages]["cpu_per_round"] / floor  # type: ignore[operator]
                print(f"  {stages} run / consumer run, CPU a round: {ratio:.2f}x")


if __name__ == "__main__":
    main()

"""Probe cost at scale on MQTT: 1,000 shards at a 20 s interval through Mosquitto.

Run: ``python benchmarks/bench_mqtt_shards.py [--shards N] [--interval S] [--intervals K]``

A Mosquitto of its own on a free loopback port, and ``sla-probe run`` as a separate
process on it: a publisher writing one canary to each of the shards every interval, a
subscriber reading them all back, and the judge, metrics and HTTP server of the real
service. After the first round (connections, imports and the first allocations are
not the steady state), the probe process is measured over whole intervals from /proc:
CPU seconds (user + system) over wall seconds as a share of one core, and its
resident memory, sampled every second. Mosquitto's CPU is shown beside it for scale.
Figures only; nothing is asserted, but a round that is not fully delivered means the
figures describe a broken probe, and they are flagged.

Mosquitto queues at most ``max_queued_messages`` (default 1000) QoS 1/2 messages per
client beyond those in flight and drops the rest: with a burst of one canary per
shard, set it above the shard count, as the broker config here does.
"""

from __future__ import annotations

import argparse
import getpass
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from probe.embedded import free_loopback_port

SLA_PROBE = Path(sys.executable).with_name("sla-probe")
TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def cpu_seconds(pid: int) -> float:
    # Fields 14 and 15 of /proc/PID/stat: user and system time in clock ticks. The
    # command name (field 2) may hold spaces, so count from its closing parenthesis.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mib(pid: int) -> float:
    resident_pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return resident_pages * PAGE_KIB / 1024


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def total(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    wanted = set(labels.items())
    return sum(
        value
        for (sample_name, sample_labels), value in samples.items()
        if sample_name == name and wanted <= sample_labels
    )


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.2)


def start_mosquitto(directory: Path, shards: int) -> tuple[subprocess.Popen[bytes], int]:
    port = free_loopback_port()
    config = directory / "mosquitto.conf"
    config.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\nuser {getpass.getuser()}\n"
        f"max_queued_messages {max(1000, 2 * shards)}\n"
    )
    broker = subprocess.Popen(
        [shutil.which("mosquitto") or "/usr/sbin/mosquitto", "-c", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def listening() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            return False

    wait_until(listening, 10, "mosquitto")
    return broker, port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=20.0, help="seconds between rounds")
    parser.add_argument("--intervals", type=int, default=3, help="whole intervals measured")
    parser.add_argument("--qos", type=int, default=1, choices=(0, 1, 2))
    options = parser.parse_args()
    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
        f"{options.shards} shards, QoS {options.qos}, every {options.interval:g}s, "
        f"measured over {options.intervals} intervals"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLA_PROBE_")}
    with tempfile.TemporaryDirectory(prefix="bench-mqtt-") as scratch:
        broker, mqtt_port = start_mosquitto(Path(scratch), options.shards)
        metrics_port = free_loopback_port()
        command = [
            str(SLA_PROBE), "run", "--allow-ephemeral-key", "--log-level", "warning",
            "--mqtt-url", f"mqtt://127.0.0.1:{mqtt_port}", "--mqtt-shards", str(options.shards),
            "--mqtt-qos", str(options.qos), "--interval", f"{options.interval}s",
            "--metrics-port", str(metrics_port),
        ]  # fmt: skip
        probe = subprocess.Popen(
            command,
            env=env,
            stderr=(Path(scratch) / "probe.log").open("wb"),
        )
        try:
            measure(probe.pid, broker.pid, metrics_port, options)
        finally:
            probe.terminate()
            probe.wait(10)
            broker.terminate()
            broker.wait(10)
            log = (Path(scratch) / "probe.log").read_text()
            if log.strip():
                print("probe log (warnings and errors):\n" + log[-3000:])


def measure(pid: int, broker_pid: int, port: int, options: argparse.Namespace) -> None:
    shards = options.shards

    def delivered() -> float:
        try:
            return total(
                scrape(port), "synthetic_sla_canaries_total", stage="mqtt", outcome="delivered"
            )
        except OSError:
            return 0.0

    # Steady state begins once the first round is fully delivered.
    wait_until(lambda: delivered() >= shards, 2 * options.interval + 30, "the first round")
    before = scrape(port)
    started = time.monotonic()
    cpu_start, broker_cpu_start = cpu_seconds(pid), cpu_seconds(broker_pid)
    rss = [rss_mib(pid)]
    window = options.intervals * options.interval
    while time.monotonic() - started < window:
        time.sleep(1.0)
        rss.append(rss_mib(pid))
    wall = time.monotonic() - started
    cpu, broker_cpu = cpu_seconds(pid) - cpu_start, cpu_seconds(broker_pid) - broker_cpu_start
    # Outside the measured window: let the last round's canaries arrive, then count.
    wait_until(
        lambda: total(scrape(port), "synthetic_sla_pending_canaries") == 0, 30, "the last round"
    )
    after = scrape(port)

    def delta(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    outcomes = {
        outcome: int(delta("synthetic_sla_canaries_total", stage="mqtt", outcome=outcome))
        for outcome in ("delivered", "late", "lost", "produce_failed")
    }
    e2e_n = delta("synthetic_sla_e2e_latency_seconds_count", stage="mqtt")
    e2e_sum = delta("synthetic_sla_e2e_latency_seconds_sum", stage="mqtt")
    ack_n = delta("synthetic_sla_produce_latency_seconds_count")
    ack_sum = delta("synthetic_sla_produce_latency_seconds_sum")
    rounds = int(delta("synthetic_sla_rounds_total"))
    print(f"  window        {wall:6.1f} s, {rounds} rounds: {outcomes}")
    print(f"  probe CPU     {cpu:6.2f} s = {100 * cpu / wall:5.2f} % of one core")
    print(f"                {1e3 * cpu / max(1, sum(outcomes.values())):6.3f} ms CPU per canary")
    print(f"  probe RSS     {rss[-1]:6.1f} MiB at the end, {max(rss):6.1f} MiB at most")
    print(f"  mosquitto CPU {100 * broker_cpu / wall:5.2f} % of one core")
    if e2e_n and ack_n:
        print(
            f"  mean latency  e2e {1e3 * e2e_sum / e2e_n:6.1f} ms, "
            f"ack {1e3 * ack_sum / ack_n:6.1f} ms"
        )
    if outcomes["delivered"] != rounds * shards:
        print("  WARNING: not every canary of the window was delivered; see the log below")


if __name__ == "__main__":
    main()

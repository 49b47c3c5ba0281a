"""Shared fixtures: the real embedded broker, a running `sla-probe run`, scraping.

Nothing here sleeps in place of a condition: `wait_for` polls a condition until a
deadline and fails with what it last saw.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import jsonschema
import pytest
from prometheus_client.parser import text_string_to_metric_families

from probe.apache_kafka.cluster import NEWEST, PREVIOUS, QUICK_START, KafkaCluster, kafka_version
from probe.core.errors import ConnectFailed
from probe.core.keys import generate_key_ring
from probe.embedded import EmbeddedBroker, free_loopback_port
from probe.transport import Transport
from tests.mosquitto import Mosquitto

T = TypeVar("T")
SLA_PROBE = str(Path(sys.executable).with_name("sla-probe"))
ONCE_REPORT_SCHEMA = Path(__file__).parents[1] / "docs" / "once-report.schema.json"


def once_report(stdout: str) -> dict[str, Any]:
    """`once --json`'s document, validated against its published schema."""
    report: dict[str, Any] = json.loads(stdout)
    jsonschema.validate(report, json.loads(ONCE_REPORT_SCHEMA.read_text()))
    return report


def failure_to_start(make: Callable[[], Transport]) -> ConnectFailed:
    """What a transport raises when it starts (it must fail), closed afterwards. It is
    made inside the event loop, as its clients need one."""

    async def start() -> None:
        transport = make()
        try:
            await transport.start()
        finally:
            await transport.close()

    with pytest.raises(ConnectFailed) as failed:
        asyncio.run(start())
    return failed.value


def target_report(stdout: str) -> dict[str, Any]:
    """The one target's part of `once --json`, for a run that probed one target."""
    report = once_report(stdout)
    (target,) = report["targets"]
    assert target["ok"] is report["ok"]
    result: dict[str, Any] = target
    return result


class FakeClock:
    """A monotonic clock in seconds that moves only when a test sets ``now``."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def wait_for(condition: Callable[[], T], *, timeout: float, what: str, every: float = 0.05) -> T:
    """Poll until condition() is truthy; return its value or fail after timeout."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(every)
    pytest.fail(f"timed out after {timeout}s waiting for {what} (last value: {last!r})")


async def until(
    condition: Callable[[], object], within: float, what: str, every: float = 0.02
) -> None:
    """Poll a condition without blocking the event loop; fail at the deadline. The
    condition may be a coroutine function (one that acts, then tells)."""
    deadline = time.monotonic() + within
    while True:
        met = condition()
        if inspect.isawaitable(met):
            met = await met
        if met:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(every)


# --- Apache Kafka: a three-broker KRaft cluster from its Maven Central jars -------------
# ``kafka_cluster`` is shared by the session: a test on it may create topics but must
# leave every broker running. A test that stops, kills or pauses a broker takes
# ``own_kafka_cluster`` (or starts a KafkaCluster of its own). Their start times and
# memory are printed in the run's summary.


class KafkaBrokers(Protocol):
    """A broker or a cluster the tests point clients at: the embedded broker, Apache
    Kafka's cluster."""

    @property
    def bootstrap_servers(self) -> str: ...


STARTS: list[tuple[str, float, int]] = []


def _started(cluster: KafkaCluster, what: str) -> KafkaCluster:
    STARTS.append((what, cluster.started_in or 0.0, cluster.resident_bytes()))
    return cluster


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with KafkaCluster(workdir=tmp_path_factory.mktemp("kafka")) as cluster:
        yield _started(cluster, "shared")


@pytest.fixture
def own_kafka_cluster(tmp_path: Path) -> Iterator[KafkaCluster]:
    with KafkaCluster(workdir=tmp_path / "kafka") as cluster:
        yield _started(cluster, "own")


# The oldest 4.x release the pom pins (its profile ``previous``), for the smoke subset:
# the tests that take ``any_kafka_cluster`` run on it as well as on the newest.
@pytest.fixture(scope="session")
def previous_kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    workdir = tmp_path_factory.mktemp("kafka-previous")
    with KafkaCluster(workdir=workdir, release=PREVIOUS) as cluster:
        yield _started(cluster, f"previous ({kafka_version(PREVIOUS)})")


@pytest.fixture(
    params=[NEWEST, pytest.param(PREVIOUS, marks=pytest.mark.previous_kafka)],
    ids=lambda release: f"kafka-{kafka_version(release)}",
)
def any_kafka_cluster(request: pytest.FixtureRequest) -> KafkaCluster:
    """The shared cluster of the newest release, then that of the previous one."""
    name = "kafka_cluster" if request.param == NEWEST else "previous_kafka_cluster"
    cluster: KafkaCluster = request.getfixturevalue(name)
    return cluster


def pytest_configure(config: pytest.Config) -> None:
    """Every JVM the tests start compiles on the JIT's first tier only, as the Kafka
    nodes do (QUICK_START): Spark's, in this process and in the commands the tests
    run. Short runs on a few records, where the second tier's compiling costs more CPU
    than it saves: `once --stages consumer,sink` took 28 % less CPU and 15 % less wall
    time on 2 cores. Benchmarks, run outside pytest, keep the full JIT."""
    options = os.environ.get("JAVA_TOOL_OPTIONS", "")
    if QUICK_START[0] not in options:
        os.environ["JAVA_TOOL_OPTIONS"] = " ".join([options, *QUICK_START]).strip()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not STARTS:
        return
    terminalreporter.section("Apache Kafka clusters (3 KRaft nodes)")
    for what, seconds, rss in STARTS:
        terminalreporter.write_line(
            f"{what}: ready in {seconds:.1f} s, {rss / 2**20:.0f} MiB resident after start"
        )


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """One embedded broker for the session; tests isolate themselves by topic."""
    log = tmp_path_factory.mktemp("broker") / "tansu.log"
    with EmbeddedBroker(log_file=log) as running:
        yield running


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """A broker this test may stop and restart."""
    with EmbeddedBroker(log_file=tmp_path / "tansu.log") as running:
        yield running


@pytest.fixture
def topic() -> str:
    return f"sla-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(generate_key_ring("test1").to_json())
    return path


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Samples of /metrics as {(name, sorted labels): value}; empty if unreachable."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
            text = reply.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return {}
    return parse_samples(text)


def parse_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Samples of a Prometheus exposition as {(name, sorted labels): value}."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def http_status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def sample(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    return sum(
        value
        for (sample_name, sample_labels), value in samples.items()
        if sample_name == name and set(labels.items()) <= set(sample_labels)
    )


def run_args(bootstrap_servers: str, topic: str, key_file: Path | None) -> list[str]:
    """Flags for a quick `sla-probe run`: one-second rounds, short timeouts."""
    key = ["--signing-key-file", str(key_file)] if key_file else []
    return [
        "--bootstrap-servers", bootstrap_servers, "--topic", topic, *key,
        "--probe-id", "probe-under-test", "--interval", "1s", "--fetch-max-wait", "20ms",
        "--send-timeout", "2s", "--create-topic",
    ]  # fmt: skip


@dataclass
class RunningProbe:
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    args: list[str] = field(default_factory=list)
    # The probe leads a process group of its own: stop() signals the whole group.
    own_group: bool = False

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return scrape(self.port)

    def canaries(self, outcome: str, stage: str = "consumer") -> float:
        return sample(self.metrics(), "synthetic_sla_canaries_total", outcome=outcome, stage=stage)

    def stop(self, timeout: float = 10.0) -> float:
        """SIGTERM (to its whole group when it leads one, as a supervisor that
        signals the group does); returns how long the process took to exit."""
        started = time.monotonic()
        if self.process.poll() is None:
            if self.own_group:
                os.killpg(self.process.pid, signal.SIGTERM)
            else:
                self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout)
        return time.monotonic() - started


@pytest.fixture
def start_probe(tmp_path: Path) -> Iterator[Callable[..., RunningProbe]]:
    """Start `sla-probe run` with the given flags; waits until /healthz answers."""
    started: list[RunningProbe] = []

    def start(
        *args: str, env: dict[str, str] | None = None, own_group: bool = False
    ) -> RunningProbe:
        """``own_group``: the probe leads a process group of its own, for a test that
        signals the whole group as a terminal or a supervisor does."""
        port = free_loopback_port()
        log = tmp_path / f"probe-{len(started)}.log"
        command = [SLA_PROBE, "run", "--metrics-port", str(port), *args]
        process = subprocess.Popen(
            command,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=own_group,
        )
        probe = RunningProbe(process, port, log, command, own_group)
        started.append(probe)
        wait_for(
            lambda: process.poll() is not None or http_status(port, "/healthz") == 200,
            timeout=20,
            what="/healthz",
        )
        assert process.poll() is None, log.read_text()
        return probe

    yield start
    for probe in started:
        if probe.process.poll() is None:
            probe.process.kill()
            probe.process.wait()
        # Shown by pytest only when the test failed: what the probe said last, so a
        # failure on a CI machine carries its story.
        tail = probe.log.read_text(errors="replace").splitlines()[-40:]
        print(f"--- last lines of {probe.log.name} ---", *(line[:300] for line in tail), sep="\n")


# --- Prometheus: a real server scraping probes (see tests/prometheus.py) ---------------


@pytest.fixture
def start_prometheus(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Start a real Prometheus scraping the probes on these ports (an instance each),
    with the shipped rules: ``start_prometheus(port, ...) -> tests.prometheus.Prometheus``."""
    # tests.prometheus waits with this module's wait_for: imported once this one is.
    from tests.prometheus import Prometheus, launch_prometheus, scraping_probes  # noqa: PLC0415

    started: list[Prometheus] = []

    def start(*probe_ports: int) -> Prometheus:
        prometheus = launch_prometheus(tmp_path, scraping_probes(*probe_ports))
        started.append(prometheus)
        return prometheus

    yield start
    for prometheus in started:
        prometheus.process.terminate()
        prometheus.process.wait(10)


# --- MQTT: real Mosquitto brokers of the tests' own (see tests/mosquitto.py) ----------


@pytest.fixture(scope="session")
def mosquitto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    """One plain Mosquitto for the session; tests isolate themselves by topic prefix."""
    with Mosquitto(tmp_path_factory.mktemp("mosquitto")) as running:
        yield running


@pytest.fixture
def topic_prefix() -> str:
    return f"sla-{uuid.uuid4().hex[:10]}"

"""Apache Kafka's own three-broker KRaft cluster (probe.apache_kafka), for the tests
that must meet the system the probe watches: replication, leader election, ISR,
controlled shutdown.

``kafka_cluster`` is shared by the session: a test on it may create topics but must
leave every broker running. A test that stops, kills or pauses a broker takes
``own_kafka_cluster``, a fresh cluster of its own. Their start times and memory are
printed in the run's summary.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from probe.apache_kafka.cluster import KafkaCluster

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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not STARTS:
        return
    terminalreporter.section("Apache Kafka clusters (3 KRaft nodes)")
    for what, seconds, rss in STARTS:
        terminalreporter.write_line(
            f"{what}: ready in {seconds:.1f} s, {rss / 2**20:.0f} MiB resident after start"
        )

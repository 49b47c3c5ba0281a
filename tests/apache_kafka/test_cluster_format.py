"""Formatting the test cluster's storage, whatever its random cluster id looks like."""

from __future__ import annotations

from pathlib import Path

import pytest

from probe.apache_kafka import cluster as kafka_cluster


def test_a_cluster_id_that_starts_with_a_dash_is_formatted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # URL-safe base64 starts with "-" one time in 32; the storage tool's parser once
    # took such an id for an option and the cluster never started.
    monkeypatch.setattr(kafka_cluster, "cluster_id", lambda: "-AbCdEfGhIjKlMnOpQrStU")
    cluster = kafka_cluster.KafkaCluster(workdir=tmp_path)
    cluster._format()
    for node in cluster.nodes.values():
        meta = (node.directory / "data" / "meta.properties").read_text()
        assert "cluster.id=-AbCdEfGhIjKlMnOpQrStU" in meta


def test_no_two_listeners_of_a_cluster_share_a_port(tmp_path: Path) -> None:
    # Ports taken one after another may repeat; a node given one port for two of its
    # listeners refuses its configuration (formatting failed so once in CI).
    cluster = kafka_cluster.KafkaCluster(
        workdir=tmp_path,
        listeners={"PLAIN2": kafka_cluster.Listener(), "PLAIN3": kafka_cluster.Listener()},
    )
    ports = [
        port
        for node in cluster.nodes.values()
        for port in (node.port, node.controller_port, node.internal_port)
    ] + [port for node in cluster.nodes.values() for port in node.listener_ports.values()]
    assert len(ports) == len(set(ports)) == 15


def test_free_loopback_ports_are_distinct() -> None:
    from probe.embedded import free_loopback_ports  # noqa: PLC0415

    assert len(set(free_loopback_ports(200))) == 200


def test_the_pom_pins_a_newest_release_with_share_groups_and_a_previous_4_0_or_4_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    newest = kafka_cluster.kafka_version(kafka_cluster.NEWEST)
    previous = kafka_cluster.kafka_version(kafka_cluster.PREVIOUS)
    # Share groups are production-ready from 4.2 (KIP-932); a user on 4.0 or 4.1 is
    # covered by the smoke subset on the previous release.
    assert tuple(map(int, newest.split(".")[:2])) >= (4, 2), newest
    assert previous.split(".")[:2] in (["4", "0"], ["4", "1"]), previous
    # Each release its own jars, under SLA_PROBE_KAFKA_LIBS when set.
    monkeypatch.setenv("SLA_PROBE_KAFKA_LIBS", str(tmp_path))
    dirs = {kafka_cluster.libs_dir(r) for r in kafka_cluster.RELEASES}
    mirror = kafka_cluster.kafka_version(kafka_cluster.MIRROR)
    tiered = kafka_cluster.kafka_version(kafka_cluster.TIERED)
    assert dirs == {
        tmp_path / f"apache-kafka-{newest}",
        tmp_path / f"apache-kafka-{previous}",
        tmp_path / f"mirrormaker2-{mirror}",
        tmp_path / f"tiered-storage-{tiered}",
    }
    assert not kafka_cluster.installed(release=kafka_cluster.PREVIOUS)

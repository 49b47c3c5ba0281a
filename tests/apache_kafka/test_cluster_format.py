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

"""Spark fixtures: one local Spark session for the whole run (start-up costs ~10 s),
and one Spark standalone cluster.

The session carries Spark's own Kafka connector from the start (its jars on
``spark.jars``, from `make spark-kafka`), as ``sink.source: kafka`` builds it: a JVM's
classpath is fixed when it starts, and a second session would cost a second JVM.
Tests of the ``sla_kafka`` source run in it alike; the jars only add a data source."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from probe.spark.session import sink_session
from tests.spark.cluster import SparkCluster, standalone_cluster


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = sink_session("local[2]", app_name="synthetic-sla-tests", source="kafka")
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """One Spark standalone cluster for the run, started by the first test that asks."""
    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster

"""Spark fixtures: one local Spark session for the whole run (start-up costs ~10 s)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from probe.spark.session import sink_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = sink_session("local[2]", app_name="synthetic-sla-tests")
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()

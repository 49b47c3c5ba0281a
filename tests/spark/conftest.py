"""Spark fixtures: one local Spark session for the whole run (start-up costs ~10 s)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

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


async def until(condition: Callable[[], object], *, within: float, what: str) -> None:
    """Poll a condition without blocking the event loop; fail at the deadline."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.1)

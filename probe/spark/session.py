"""The Spark session the sink stage runs in: local mode embedded, or a cluster's."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

# RocksDB keeps transformWithState's state off the JVM heap and is the provider the
# stateful operator is built for. The larger driver thread stack avoids a
# StackOverflowError Spark can hit formatting an interrupt while a query stops
# mid-batch (SPARK-48717).
_SESSION_CONF = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    # Progress bars on stderr would interleave with the probe's own logs.
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.extraJavaOptions": "-Xss4m",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}


def sink_session(
    master: str | None = "local[*]", app_name: str = "synthetic-sla-sink"
) -> SparkSession:
    """A session for the sink. ``master=None`` keeps what spark-submit configured."""
    # Executors in local mode run this interpreter, so they import the same `probe`.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    for name, value in _SESSION_CONF.items():
        builder = builder.config(name, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session

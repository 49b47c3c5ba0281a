"""The Spark session the sink stage runs in: local mode embedded, or a cluster's."""

from __future__ import annotations

import os
import subprocess
import sys

from pyspark import SparkConf, SparkContext
from pyspark.errors import PySparkRuntimeError
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from probe.errors import StageFailed

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

# Lines of Spark's output quoted when its JVM does not start (no Java, a bad option).
_FAILURE_TAIL_LINES = 8


def starts_own_jvm() -> bool:
    """Whether a session started here launches Spark's JVM itself. Under spark-submit
    the JVM is spark-submit's, already running (pyspark's own test), and its output
    is spark-submit's to place."""
    return "PYSPARK_GATEWAY_PORT" not in os.environ


def sink_session(
    master: str | None = "local[*]",
    app_name: str = "synthetic-sla-sink",
    spark_output: str | None = None,
) -> SparkSession:
    """A session for the sink. ``master=None`` keeps what spark-submit configured.

    ``spark_output``: a file Spark's own output is appended to (its JVM's log4j lines
    and start-up warnings, the prints of its Python workers, which reach the JVM's
    stderr), when this process launches the JVM; None leaves that output on this
    process's stdout and stderr.
    """
    # Executors in local mode run this interpreter, so they import the same `probe`.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = {"spark.app.name": app_name, **_SESSION_CONF}
    if master:
        settings["spark.master"] = master
    # SparkContext._gateway is pyspark's one JVM per process: a later session reuses it.
    if spark_output is not None and starts_own_jvm() and SparkContext._gateway is None:
        _start_context(settings, spark_output)
    builder = SparkSession.builder
    for name, value in settings.items():
        builder = builder.config(name, value)
    # Reuses the context started above, if any.
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def _start_context(settings: dict[str, str], spark_output: str) -> None:
    """Launch Spark's JVM with its stdout and stderr on ``spark_output``, and a context
    on it. The JVM writes to its file descriptors from its first line on (before any
    log level can be set), and Spark's Python workers print to the JVM's stderr: the
    JVM's own descriptors are the one place all of it passes."""
    conf = SparkConf().setAll(list(settings.items()))
    with open(spark_output, "ab") as output:  # the JVM keeps its own copy of the descriptor
        try:
            gateway = launch_gateway(  # type: ignore[no-untyped-call]
                conf, popen_kwargs={"stdout": output, "stderr": subprocess.STDOUT}
            )
        except PySparkRuntimeError as exc:
            why = (
                f"{spark_output} ends with: {_tail(spark_output)}"
                if spark_output != os.devnull
                else "its output was discarded: set sink.spark_log (--spark-log) to see why"
            )
            raise StageFailed(f"Spark's JVM did not start; {why}") from exc
    SparkContext(conf=conf, gateway=gateway)


def _tail(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as output:
            lines = [line.strip() for line in output if line.strip()]
    except OSError as exc:
        return f"(unreadable: {exc.strerror})"
    return " | ".join(lines[-_FAILURE_TAIL_LINES:]) or "(nothing)"

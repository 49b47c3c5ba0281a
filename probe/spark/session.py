"""The Spark session the sink stage runs in: local mode embedded, or a cluster's."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pyspark import SparkConf, SparkContext
from pyspark.errors import PySparkRuntimeError
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from probe.core.errors import ConfigError, StageFailed
from probe.spark import class_archive
from probe.spark.kafka_connector import CONNECTOR_NAME
from probe.spark_kafka.jars import session_jars

log = logging.getLogger(__name__)

# The probe's defaults, never forced: a setting from spark-submit's --conf (or
# spark-defaults.conf under spark-submit) wins over these, and sink.spark_conf over both.
# RocksDB keeps transformWithState's state off the JVM heap and is the provider the
# stateful operator is built for; with changelog checkpointing a batch's commit writes
# the state it changed, not a snapshot of the store (snapshots follow in the
# background), and a checkpoint written without it is read as it is. The larger
# driver thread stack avoids a StackOverflowError Spark can hit formatting an
# interrupt while a query stops mid-batch (SPARK-48717); it only reaches a JVM this
# process launches: under spark-submit the driver JVM runs already, and the command
# of docs/spark-sink.md passes it.
DEFAULT_CONF = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    # Progress bars on stderr would interleave with the probe's own logs.
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.extraJavaOptions": "-Xss4m",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}
DRIVER_STACK = "-Xss4m"
# A short run (`once`: a query that judges a few rounds, then stops) compiles with the
# JIT's first tier only: on a few records the second tier's compiling costs more CPU
# than it saves (`once --stages consumer,sink` on 2 cores: 28 % less CPU, 15 % less
# wall time). A long-running sink keeps the full JIT.
QUICK_JIT = "-XX:TieredStopAtLevel=1"
# A batch job (reconcile) collects with the throughput collector: on 2 cores G1's
# concurrent threads compete with the job's own, and nobody waits on its pauses.
# Reconciling 2,000,000 records, the whole command: 29.6 s where G1 took 34.1
# (medians of 4, a 2-core VM).
BATCH_GC = "-XX:+UseParallelGC"
# Option names whose values Spark redacts where it prints a plan's options (its
# spark.sql.redaction.options.regex), for the secrets Spark's Kafka connector is given.
CONNECTOR_SECRETS = r"jaas\.config|keystore\.key|password"

# Lines of Spark's output quoted when its JVM does not start (no Java, a bad option).
_FAILURE_TAIL_LINES = 8


def spark_output(spark_log: str | None, sink_path: str) -> str | None:
    """The file Spark's own output goes to (``sink.spark_log``), None for stderr.

    Unset: ``spark.log`` beside the sink's tables when they are on a local disk, else
    (``s3a://``, ``hdfs://``...) nowhere. Spark's lines are not the probe's: on
    stderr they break a log pipeline that parses the probe's JSON lines.
    """
    if spark_log == "-":
        return None
    if spark_log is not None:
        return spark_log
    url = urlsplit(sink_path)
    if url.scheme == "file":
        return os.path.join(url.path, "spark.log")
    if url.scheme == "":
        return os.path.join(sink_path, "spark.log")
    return os.devnull


def writable_spark_output(spark_log: str | None, sink_path: str) -> str | None:
    """:func:`spark_output`, ready to append to before Spark starts: the sink path is
    created for the default ``spark.log`` in it (the command writes its tables or its
    report there anyway), a ``sink.spark_log`` given is taken as it is. A file that
    cannot be written is a ConfigError naming its setting, never a traceback from
    Spark's start."""
    path = spark_output(spark_log, sink_path)
    if path is None or path == os.devnull:
        return path
    explicit = spark_log is not None
    try:
        if not explicit:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "ab"):
            pass
    except OSError as exc:
        field = "sink.spark_log" if explicit else "sink.path"
        raise ConfigError(field, f"cannot write Spark's log {path}: {exc.strerror}") from exc
    return path


def starts_own_jvm() -> bool:
    """Whether a session started here launches Spark's JVM itself. Under spark-submit
    the JVM is spark-submit's, already running (pyspark's own test), and its output
    is spark-submit's to place."""
    return "PYSPARK_GATEWAY_PORT" not in os.environ


def session_conf(
    given: Mapping[str, str],
    spark_conf: Mapping[str, str],
    master: str | None,
    *,
    short_run: bool = False,
    batch: bool = False,
) -> dict[str, str]:
    """The settings to apply over ``given`` (what spark-submit already set): the
    probe's defaults where nothing was given, then ``sink.spark_conf``, then the
    master when the config names one. ``short_run`` adds :data:`QUICK_JIT` to the
    default driver options (a driver JVM this process launches; in local mode the
    executors run in it too), ``batch`` :data:`BATCH_GC`.

    >>> session_conf({"spark.ui.enabled": "true"}, {}, None)["spark.ui.enabled"]
    'true'
    >>> conf = session_conf({}, {"spark.sql.shuffle.partitions": "8"}, None)
    >>> conf["spark.sql.shuffle.partitions"]
    '8'
    >>> session_conf({}, {}, None, short_run=True)["spark.driver.extraJavaOptions"]
    '-Xss4m -XX:TieredStopAtLevel=1'
    >>> session_conf({}, {}, None, batch=True)["spark.driver.extraJavaOptions"]
    '-Xss4m -XX:+UseParallelGC'
    >>> options = {"spark.driver.extraJavaOptions": "-Xss8m"}
    >>> session_conf({}, options, None, short_run=True)["spark.driver.extraJavaOptions"]
    '-Xss8m'
    """
    settings = {name: given.get(name, value) for name, value in DEFAULT_CONF.items()}
    if "spark.driver.extraJavaOptions" not in given:
        settings["spark.driver.extraJavaOptions"] += "".join(
            f" {option}" for option, wanted in ((QUICK_JIT, short_run), (BATCH_GC, batch)) if wanted
        )
    settings.update(spark_conf)
    if master:
        settings["spark.master"] = master
    return settings


def executors_python(master: str | None, settings: Mapping[str, str]) -> str | None:
    """The interpreter to hand to executors, or None to leave it to Spark's settings.

    In local mode the executors are this process's children: this interpreter, which
    has the ``probe`` package. On a cluster they run on other hosts, where this path
    may not exist: Spark's own ``spark.pyspark.python`` (or ``PYSPARK_PYTHON``, or an
    ``--archives`` environment) decides there (docs/spark-sink.md, "On a Spark cluster").
    """
    if settings.get("spark.pyspark.python") or not (master or "").startswith("local"):
        return None
    return sys.executable


def connector_conf(
    source: str, given: Mapping[str, str], settings: Mapping[str, str], *, own_jvm: bool
) -> dict[str, str]:
    """What a session reading with ``source`` adds to its settings: for Spark's Kafka
    connector (``kafka``), its cached jars on ``spark.jars`` (after any given there),
    and option redaction for the secrets the connector's options carry (SASL's JAAS
    line, an inline TLS key) wherever Spark prints a plan's options. Nothing for
    ``sla_kafka``, which installs with pip alone. ConfigError naming ``sink.source``
    when the jars are missing (see probe.spark_kafka.jars.session_jars).

    >>> connector_conf("sla_kafka", {}, {}, own_jvm=True)
    {}
    """
    if source != CONNECTOR_NAME:
        return {}
    conf = {**given, **settings}
    jars = session_jars(conf, own_jvm=own_jvm)
    added: dict[str, str] = {}
    if jars:
        added["spark.jars"] = ",".join(filter(None, [conf.get("spark.jars"), *jars]))
    redact = conf.get("spark.sql.redaction.options.regex", "(?i)url")
    added["spark.sql.redaction.options.regex"] = f"{redact}|{CONNECTOR_SECRETS}"
    return added


def sink_session(
    master: str | None = "local[*]",
    app_name: str = "synthetic-sla-sink",
    spark_output: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    *,
    streaming: bool = True,
    source: str = "sla_kafka",
    short_run: bool = False,
    one_shot: bool | None = None,
) -> SparkSession:
    """A session for the sink. ``master=None`` keeps what spark-submit configured.

    ``spark_output``: a file Spark's own output is appended to (its JVM's log4j lines
    and start-up warnings, the prints of its Python workers, which reach the JVM's
    stderr), when this process launches the JVM; None leaves that output on this
    process's stdout and stderr.

    ``streaming=False`` (a batch job such as `sla-probe reconcile`) never stops a
    query mid-batch, so a driver JVM without the larger stack is not worth a warning;
    its JVM collects with :data:`BATCH_GC`.

    ``source``: what the session's jobs read Kafka with (``sink.source``); ``kafka``
    puts Spark's connector on the classpath from the start (:func:`connector_conf`).
    A JVM already running in this process keeps the classpath it started with.

    ``short_run``: a session for a few batches (`once`), whose JVM compiles with the
    JIT's first tier only (:data:`QUICK_JIT`) when this process launches it.

    ``one_shot`` (default: ``short_run``): a run that ends by itself (`once`, a single
    `reconcile`), whose JVM may write the class archive later runs start from
    (:mod:`probe.spark.class_archive`); any launch uses one that exists.
    """
    given = {} if starts_own_jvm() else _submitted_conf()
    settings = {
        "spark.app.name": app_name,
        **session_conf(given, spark_conf or {}, master, short_run=short_run, batch=not streaming),
    }
    settings.update(connector_conf(source, given, settings, own_jvm=starts_own_jvm()))
    effective_master = settings.get("spark.master", given.get("spark.master"))
    python = executors_python(effective_master, {**given, **settings})
    if python is not None:
        os.environ.setdefault("PYSPARK_PYTHON", python)
    stack = given.get("spark.driver.extraJavaOptions", "")
    if streaming and not starts_own_jvm() and DRIVER_STACK not in stack:
        log.warning(
            "the driver JVM runs without %s: a query stopped mid-batch may log a "
            "StackOverflowError (SPARK-48717); pass --driver-java-options %s to spark-submit",
            DRIVER_STACK,
            DRIVER_STACK,
        )
    # SparkContext._gateway is pyspark's one JVM per process: a later session reuses it.
    if starts_own_jvm() and SparkContext._gateway is None:
        _start_context(settings, spark_output, short_run if one_shot is None else one_shot)
    builder = SparkSession.builder
    for name, value in settings.items():
        builder = builder.config(name, value)
    # Reuses the context started above, if any.
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def _submitted_conf() -> dict[str, str]:
    """What spark-submit set (its --conf, spark-defaults.conf, --master...): the
    system properties of the JVM it started, which a new SparkConf loads."""
    SparkContext._ensure_initialized()
    return dict(SparkConf().getAll())


def _start_context(
    settings: dict[str, str], spark_output: str | None, one_shot: bool = False
) -> None:
    """Launch Spark's JVM, with its stdout and stderr on ``spark_output`` (None: this
    process's), and a context on it.

    The JVM writes to its file descriptors from its first line on (before any log
    level can be set), and Spark's Python workers print to the JVM's stderr: the JVM's
    own descriptors are the one place all of it passes.

    The JVM runs in a session of its own, so a signal to this process's group (Ctrl-C
    in a terminal, `timeout`, a supervisor that signals the whole group) reaches the
    probe alone: the probe stops its query, then its session, and only then may the
    JVM go. A JVM signalled with it ran its shutdown hooks under a running query,
    which failed (an INTERNAL_ERROR in Spark's log) while the probe's calls into it
    broke. It still ends with this process, however that ends: pyspark's JVM exits
    when its stdin, a pipe from this process, closes.
    """
    archive = class_archive.for_driver(settings, may_write=one_shot)
    if archive is not None:
        driver = settings.get("spark.driver.extraJavaOptions", "")
        settings = {
            **settings,
            "spark.driver.extraJavaOptions": f"{driver} {archive.java_option}".strip(),
        }
    conf = SparkConf().setAll(list(settings.items()))
    with contextlib.ExitStack() as files:
        popen: dict[str, Any] = {"start_new_session": True}
        if spark_output is not None:
            # The JVM keeps its own copy of the descriptor.
            output = files.enter_context(open(spark_output, "ab"))
            popen.update(stdout=output, stderr=subprocess.STDOUT)
        try:
            gateway = launch_gateway(conf, popen_kwargs=popen)  # type: ignore[no-untyped-call]
        except PySparkRuntimeError as exc:
            raise StageFailed(f"Spark's JVM did not start; {_why_not(spark_output)}") from exc
    if archive is not None and archive.dump is not None:
        # At this process's exit: the JVM writes the archive as it exits.
        atexit.register(_write_archive, archive, gateway.proc)
    SparkContext(conf=conf, gateway=gateway)


def _write_archive(archive: class_archive.ArchiveUse, jvm: subprocess.Popen[bytes]) -> None:
    """Stop the context first (its Python side serves the JVM until then: a JVM gone
    under it logged a socket server's traceback), then let the JVM exit and write."""
    _stop_context()
    archive.finish(jvm)


def _stop_context() -> None:
    """Stop pyspark's active context, if any, whatever state its JVM is in."""
    with contextlib.suppress(Exception):
        if SparkContext._active_spark_context is not None:
            SparkContext._active_spark_context.stop()


def _why_not(spark_output: str | None) -> str:
    """Where to read why Spark's JVM did not start."""
    if spark_output is None:
        return "its output is on stderr"
    if spark_output == os.devnull:
        return "its output was discarded: set sink.spark_log (--spark-log) to see why"
    return f"{spark_output} ends with: {_tail(spark_output)}"


def _tail(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as output:
            lines = [line.strip() for line in output if line.strip()]
    except OSError as exc:
        return f"(unreadable: {exc.strerror})"
    return " | ".join(lines[-_FAILURE_TAIL_LINES:]) or "(nothing)"


def forget_session() -> None:
    """Drop pyspark's handles on a JVM that died (local mode: this process's child),
    so the next :func:`sink_session` launches a new one instead of reusing a dead
    gateway. pyspark keeps one JVM per process in class attributes; nothing else
    resets them short of a new process."""
    _stop_context()  # what is left of the old one
    SparkContext._active_spark_context = None
    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None

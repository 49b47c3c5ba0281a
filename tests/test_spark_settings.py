"""Spark settings the sink stage chooses, and how it names a failed query (pure: no
Spark session started)."""

from __future__ import annotations

import sys

import pytest

from probe.spark.health import failure_reason, failure_summary
from probe.spark.kafka_options import starting_map
from probe.spark.session import BATCH_GC, DEFAULT_CONF, QUICK_JIT, executors_python, session_conf


def test_the_probes_spark_settings_are_defaults_only() -> None:
    given = {"spark.ui.enabled": "true", "spark.sql.shuffle.partitions": "64"}
    settings = session_conf(given, {}, None)
    assert settings["spark.ui.enabled"] == "true"
    assert settings["spark.sql.shuffle.partitions"] == "64"
    assert settings["spark.ui.showConsoleProgress"] == DEFAULT_CONF["spark.ui.showConsoleProgress"]
    assert "spark.master" not in settings


def test_sink_spark_conf_wins_over_spark_submit_and_the_master_over_both() -> None:
    settings = session_conf(
        {"spark.sql.shuffle.partitions": "64", "spark.master": "spark://m:7077"},
        {"spark.sql.shuffle.partitions": "8", "spark.jars.packages": "g:a:1"},
        "local[2]",
    )
    assert settings["spark.sql.shuffle.partitions"] == "8"
    assert settings["spark.jars.packages"] == "g:a:1"
    assert settings["spark.master"] == "local[2]"


def test_a_short_run_compiles_with_the_first_tier_unless_told_otherwise() -> None:
    """`once` starts Spark for a few batches: its driver JVM (the executors too, in
    local mode) compiles with C1 only, beside the probe's own default options; a
    sink.spark_conf that sets the driver's options is taken as it is."""
    options = "spark.driver.extraJavaOptions"
    assert session_conf({}, {}, None, short_run=True)[options] == f"-Xss4m {QUICK_JIT}"
    assert QUICK_JIT not in session_conf({}, {}, None)[options]
    assert session_conf({}, {options: "-Xss8m"}, None, short_run=True)[options] == "-Xss8m"


def test_a_batch_job_collects_with_the_throughput_collector_unless_told_otherwise() -> None:
    """reconcile's driver JVM runs the parallel collector (a short one the first JIT
    tier too); the streaming sink keeps the JVM's default; options given win."""
    options = "spark.driver.extraJavaOptions"
    assert session_conf({}, {}, None, batch=True)[options] == f"-Xss4m {BATCH_GC}"
    assert (
        session_conf({}, {}, None, short_run=True, batch=True)[options]
        == f"-Xss4m {QUICK_JIT} {BATCH_GC}"
    )
    assert BATCH_GC not in session_conf({}, {}, None, short_run=True)[options]
    assert session_conf({options: "-Xss8m"}, {}, None, batch=True)[options] == "-Xss8m"


@pytest.mark.parametrize(
    ("master", "settings", "expected"),
    [
        ("local[*]", {}, sys.executable),
        ("local[2]", {"spark.pyspark.python": "/opt/env/bin/python"}, None),
        ("spark://master:7077", {}, None),
        (None, {}, None),
    ],
)
def test_executors_get_this_interpreter_only_in_local_mode(
    master: str | None, settings: dict[str, str], expected: str | None
) -> None:
    assert executors_python(master, settings) == expected


FOREACH_FAILURE = """\
[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in \
foreach batch sink. Reason: An exception was raised by the Python Proxy. Return Message: \
Traceback (most recent call last):
  File "/work/probe/spark/sink.py", line 261, in commit_batch
    write_batch(self.settings.path, rows, batch_id, commit_ns)
OSError: [Errno 28] No space left on device: '/data/my_checkpoint_tests/canaries'
 SQLSTATE: 39000
\tat org.apache.spark.sql.execution.streaming.sources.ForeachBatchSink.callBatchWriter(x:60)
"""


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (None, "stopped"),
        ("[CONCURRENT_STREAM_LOG_UPDATE] Concurrent update to the log. Multiple streaming "
         "jobs detected for 0", "checkpoint"),
        ("java.io.IOException: Failed to write to HDFSMetadataLog at s3a://b/_checkpoint/offsets",
         "checkpoint"),
        ("PythonException: File \"/app/probe/spark/kafka_source.py\", line 280, in latestOffset\n"
         "kafka.errors.NoBrokersAvailable", "source"),
        # A task of the sla_kafka source failing its read: named by the exception's
        # class, whatever file raised it.
        ("Job aborted due to stage failure: PythonException: probe.core.errors."
         "SourceReadTimedOut: offsets of topic t not readable within 60s", "source"),
        ("Job aborted due to stage failure: PythonException: probe.core.errors."
         "SourceReadFailed: cannot read topic t: SASL authentication error", "source"),
        ("PythonException: OSError: [Errno 28] No space left on device: '/data/canaries'",
         "batch"),
        # A Python error in the batch, the sink under a path naming a checkpoint.
        (FOREACH_FAILURE, "batch"),
        ("[STREAM_FAILED] Query [id = 1] terminated with exception: "
         "[CANNOT_LOAD_STATE_STORE.UNCATEGORIZED] An error occurred during loading state.",
         "checkpoint"),
    ],
)  # fmt: skip
def test_a_failed_query_is_named_by_what_failed(failure: str | None, reason: str) -> None:
    assert failure_reason(failure) == reason


@pytest.mark.parametrize(
    ("starting", "expected"),
    [("latest", None), ("earliest", None), ('{"0": 5, "3": 0}', {"0": 5, "3": 0})],
)
def test_starting_offsets_are_a_position_or_a_pinned_map(
    starting: str, expected: dict[str, int] | None
) -> None:
    assert starting_map(starting) == expected


@pytest.mark.parametrize("starting", ["newest", '{"a": 1}', '{"0": -1}', "[1, 2]", '{"0": "5"}'])
def test_bad_starting_offsets_are_refused(starting: str) -> None:
    with pytest.raises(ValueError, match="startingOffsets"):
        starting_map(starting)


@pytest.mark.parametrize(
    ("failure", "summary"),
    [
        (
            FOREACH_FAILURE,
            "[FOREACH_BATCH_USER_FUNCTION_ERROR] OSError: [Errno 28] No space left on device: "
            "'/data/my_checkpoint_tests/canaries'",
        ),
        (
            "[CONCURRENT_STREAM_LOG_UPDATE] Concurrent update to the log. Multiple streaming "
            "jobs detected for 12\n\tat org.apache.spark...",
            "[CONCURRENT_STREAM_LOG_UPDATE] Concurrent update to the log. Multiple streaming "
            "jobs detected for 12",
        ),
    ],
)
def test_a_failed_query_is_said_in_one_line(failure: str, summary: str) -> None:
    assert failure_summary(failure) == summary

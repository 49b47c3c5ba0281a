"""Where the sink's Spark output goes, and the progress notes of `once` on a terminal.
No Spark is started here."""

from __future__ import annotations

import io
import os
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from probe.config import ProbeConfig
from probe.core.errors import ConfigError
from probe.core.keys import KeyRing
from probe.spark.session import spark_output, writable_spark_output
from probe.spark.stage import SinkProgress, SparkSinkStage
from tests.conftest import SLA_PROBE, FakeClock, target_report


@pytest.mark.parametrize(
    ("spark_log", "sink_path", "expected"),
    [
        (None, "/data/sla-sink", "/data/sla-sink/spark.log"),
        (None, "file:///data/sla-sink", "/data/sla-sink/spark.log"),
        (None, "s3a://bucket/sla-sink", os.devnull),
        ("/var/log/spark.log", "s3a://bucket/sla-sink", "/var/log/spark.log"),
        ("-", "/data/sla-sink", None),
    ],
)
def test_spark_output_follows_the_setting_then_the_sink_path(
    spark_log: str | None, sink_path: str, expected: str | None
) -> None:
    assert spark_output(spark_log, sink_path) == expected


RING = KeyRing({"k1": b"0123456789abcdef"}, active="k1")


def _config(**sink: str) -> ProbeConfig:
    return ProbeConfig.model_validate(
        {"kafka": {"bootstrap_servers": "127.0.0.1:9092"}, "sink": sink}
    )


def test_an_unwritable_spark_log_is_a_config_error_before_spark_starts(tmp_path: Path) -> None:
    config = _config(path=str(tmp_path), spark_log=f"{tmp_path}/missing/spark.log")
    with pytest.raises(ConfigError, match=r"^sink\.spark_log: cannot write Spark's log"):
        SparkSinkStage(config, RING, [])


def test_the_default_spark_log_creates_the_sink_path_it_lives_in(tmp_path: Path) -> None:
    """Every command that starts Spark writes in the sink path (tables, reports): its
    default spark.log there creates it, where a missing one was a traceback."""
    sink_path = tmp_path / "not-yet" / "sink"
    assert writable_spark_output(None, str(sink_path)) == str(sink_path / "spark.log")
    assert (sink_path / "spark.log").is_file()
    assert writable_spark_output(None, "s3a://bucket/sla-sink") == os.devnull
    with pytest.raises(ConfigError, match=r"^sink\.spark_log: cannot write Spark's log"):
        writable_spark_output(str(tmp_path / "elsewhere" / "spark.log"), str(sink_path))


def test_spark_submit_keeps_spark_output_where_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    # spark-submit hands its JVM to the Python driver through this variable.
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")
    config = _config(path="/nonexistent/sla-sink", spark_log="/nonexistent/spark.log")
    assert SparkSinkStage(config, RING, []).spark_output is None


@pytest.fixture
def terminal() -> Iterator[tuple[io.TextIOWrapper, int]]:
    """A real terminal (a pseudo-terminal's far end) and the fd its output is read on."""
    controller, device = os.openpty()
    with open(device, "w", encoding="utf-8") as stream:
        yield stream, controller
    os.close(controller)


def test_progress_on_a_terminal_says_starting_then_ready(
    terminal: tuple[io.TextIOWrapper, int],
) -> None:
    stream, controller = terminal
    clock = FakeClock()
    progress = SinkProgress(stream, clock=clock)
    clock.now += 24.6
    progress.ready()
    expected = "starting Spark for the sink stage...\nsink stage ready (25s)\n"
    assert _read_terminal(controller, len(expected)) == expected


def _read_terminal(controller: int, length: int, timeout: float = 5.0) -> str:
    """What the terminal shows, read until ``length`` characters or the deadline: one
    read may return only part of it (the last newline came late once)."""
    deadline = time.monotonic() + timeout
    raw = b""
    while len(raw.replace(b"\r\n", b"\n")) < length and time.monotonic() < deadline:
        ready, _, _ = select.select([controller], [], [], 0.1)
        if ready:
            raw += os.read(controller, 4096)
    return raw.decode().replace("\r\n", "\n")


def test_progress_off_a_terminal_writes_nothing() -> None:
    captured = io.StringIO()
    SinkProgress(captured).ready()
    assert captured.getvalue() == ""
    read_end, write_end = os.pipe()
    with open(write_end, "w", encoding="utf-8") as pipe:
        SinkProgress(pipe).ready()
    with open(read_end, encoding="utf-8") as reader:
        assert reader.read() == ""


def test_once_whose_sink_cannot_start_says_why_and_stops_cleanly() -> None:
    """No Java runtime: the report's error says so, one exit code, no traceback."""
    result = subprocess.run(
        [SLA_PROBE, "once", "--embedded", "--stages", "consumer,sink", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "JAVA_HOME": "/nonexistent-java"},
    )
    assert result.returncode == 1, result.stderr
    report = target_report(result.stdout)
    assert report["error"].startswith("sink stage did not start: Spark's JVM did not start")
    assert "/nonexistent-java/bin/java" in report["error"]
    assert "Traceback" not in result.stderr
    assert "Unclosed" not in result.stderr

"""`once` and `run` with the Spark sink stage, as commands."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from probe.embedded import EmbeddedBroker
from tests.conftest import SLA_PROBE, target_report


def test_once_with_the_sink_stage_exits_zero_and_keeps_spark_off_stderr(tmp_path: Path) -> None:
    spark_log = tmp_path / "spark.log"
    result = subprocess.run(
        [
            SLA_PROBE,
            "once",
            "--embedded",
            "--stages",
            "consumer,sink",
            "--json",
            "--spark-log",
            str(spark_log),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = target_report(result.stdout)
    assert report["ok"] is True
    for stage in ("consumer", "sink"):
        assert report["stages"][stage]["outcomes"]["delivered"] == 9
    # stderr is the probe's JSON log lines and nothing else (none at all on a pass).
    for line in result.stderr.splitlines():
        entry = json.loads(line)
        assert set(entry) >= {"ts", "level", "logger", "msg"}, line
        assert entry["logger"].startswith("probe"), line
    # Spark's own output was kept, not lost: its JVM's start-up lines and the prints
    # of its Python workers (the stateful judge's driver-side worker).
    kept = spark_log.read_text()
    assert "log4j" in kept
    assert "TransformWithStateInPandas Python worker" in kept


def test_run_with_the_sink_needs_a_durable_path(broker: EmbeddedBroker, topic: str) -> None:
    result = subprocess.run(
        [SLA_PROBE, "run", "--bootstrap-servers", broker.bootstrap_servers, "--topic", topic,
         "--allow-ephemeral-key", "--stages", "consumer,sink"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "sla-probe: config error: sink.path: required for a long-running sink (--sink-path)"
    ]

"""`sla-probe reconcile` refuses bad settings with exit 2 and one line naming the
field, before starting Spark."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest

from probe.config import load
from probe.reconcile.reconciler import settings_of
from probe.reconcile.windows import WindowSpec
from probe.spark.checksum import RecordFormat
from tests.conftest import SLA_PROBE

BROKER = ["--bootstrap-servers", "127.0.0.1:9"]


def _reconcile(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SLA_PROBE, "reconcile", *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            [],
            "kafka.bootstrap_servers: required by reconcile (--bootstrap-servers)",
        ),
        (
            BROKER,
            "reconcile.table: required (--table), or sink.path (--sink-path)",
        ),
        (
            [*BROKER, "--sink-path", "/data/sla-sink"],
            "signing_key_file: required by reconcile with format canary: records are "
            "verified as the sink stage verifies them (--signing-key-file)",
        ),
        (
            [*BROKER, "--table", "/t", "--format", "raw", "--window-offsets", "0"],
            "reconcile.window.offsets: Input should be greater than or equal to 1",
        ),
        (
            [
                *BROKER,
                "--table",
                "/t",
                "--format",
                "raw",
                "--window",
                "1m",
                "--window-offsets",
                "9",
            ],
            "reconcile.window.offsets: give reconcile.window.duration or .offsets, not both",
        ),
        (
            [*BROKER, "--table", "/t", "--format", "json"],
            "reconcile.checksum_columns: required with format json: the fields to compare",
        ),
        (
            [*BROKER, "--table", "/t", "--format", "raw", "--checksum-columns", "a,b"],
            "reconcile.checksum_columns: format raw compares one column with the record's value",
        ),
        (
            [*BROKER, "--table", "/t", "--key-column", "id"],
            "reconcile.key_column: format canary matches by partition and offset",
        ),
        (
            [*BROKER, "--table", "/t", "--format", "raw", "--time-column", "ts"],
            "reconcile.time_column: needs key_column (it matches rows by key)",
        ),
        (
            [*BROKER, "--table", "/t", "--format", "raw", "--key-column", "k", "--source-key", "k"],
            "reconcile.source_key: a field of a JSON value: format json only",
        ),
        (
            [*BROKER, "--table", "/t", "--format", "xml"],
            "reconcile.format: Input should be 'canary', 'raw' or 'json'",
        ),
        (
            [*BROKER, "--table", "/t", "--format", "raw", "--settle", "nan"],
            "reconcile.settle: not a finite duration: 'nan'",
        ),
        (
            [*BROKER, "--table", "/t", "--format", "raw", "--every", "1ms"],
            "reconcile.every: must be between 1s and 24h, got 1ms",
        ),
        (
            [*BROKER, "--table", "/t", "--format", "raw", "--run-id", "../etc"],
            "--run-id: '../etc': use letters, digits and . _ : - (it names a directory)",
        ),
    ],
)
def test_a_bad_setting_exits_2_with_one_line_naming_it(args: list[str], line: str) -> None:
    started = time.monotonic()
    result = _reconcile(*args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"sla-probe: config error: {line}"]
    assert result.stdout == ""
    assert time.monotonic() - started < 30  # no Spark was started for it


def test_every_with_its_metrics_port_taken_exits_2_before_spark(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _reconcile(
            *BROKER, "--table", str(tmp_path), "--format", "raw", "--every", "1m",
            "--metrics-host", "127.0.0.1", "--metrics-port", str(port),
        )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1].startswith(
        f"sla-probe: config error: metrics.port: cannot listen on 127.0.0.1:{port}"
    )


def test_settings_follow_the_config() -> None:
    config = load(
        overrides={
            "kafka.bootstrap_servers": "k:9092",
            "kafka.topic": "orders",
            "sink.path": "s3a://bucket/sink/",
            "sink.freshness": "45s",
            "signing_key_file": "/keys/keys.json",
        }
    )
    settings = settings_of(config, keyring_json="{}")
    assert settings.table == "s3a://bucket/sink/canaries"
    # Windows of 5 minutes of record time, settled after the sink's freshness.
    assert settings.window == WindowSpec(duration_ms=300_000)
    assert settings.settle_s == 45.0
    assert settings.lookback_s == 3600.0
    assert settings.record_format is RecordFormat.CANARY
    assert settings.columns[:2] == ("probe_id", "incarnation")
    raw = load(
        overrides={
            "kafka.bootstrap_servers": "k:9092",
            "reconcile.table": "/lake/orders",
            "reconcile.format": "raw",
            "reconcile.checksum_columns": "payload",
            "reconcile.window.offsets": "1000",
            "reconcile.settle": "2m",
            "kafka.sasl": {"mechanism": "PLAIN", "username": "u", "password": "p"},
        }
    )
    settings = settings_of(raw, keyring_json=None)
    assert (settings.table, settings.columns, settings.settle_s) == (
        "/lake/orders",
        ("payload",),
        120.0,
    )
    assert settings.window == WindowSpec(offsets=1000)
    # Kafka's security settings reach the source as its kafka.* options.
    assert settings.source_options()["kafka.sasl.mechanisms"] == "PLAIN"
    assert settings.source_options()["kafka.security.protocol"] == "SASL_PLAINTEXT"

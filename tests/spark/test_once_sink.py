"""`once` and `run` with the Spark sink stage, as commands."""

from __future__ import annotations

import json
import subprocess

from probe.embedded import EmbeddedBroker
from tests.conftest import SLA_PROBE


def test_once_with_the_sink_stage_exits_zero() -> None:
    result = subprocess.run(
        [SLA_PROBE, "once", "--stages", "consumer,sink", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["ok"] is True
    for stage in ("consumer", "sink"):
        assert report["stages"][stage]["outcomes"]["delivered"] == 9


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

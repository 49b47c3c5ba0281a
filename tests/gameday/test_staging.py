"""Staging mode against a pipeline the test sets up itself: a real broker, `sla-probe
run`, and a real Prometheus with the shipped rules, as a user's staging would be.
The hooks freeze and thaw the broker process (SIGSTOP, SIGCONT): a broker that stops
answering, as a shell command in a user's hook would make it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from probe.embedded import EmbeddedBroker
from probe.gameday.local import SHIPPED_RULES
from probe.gameday.prometheus import LocalPrometheus
from probe.gameday.scenario import LIVE_PROBE, Hook
from probe.gameday.staging import run_hook
from tests.conftest import SLA_PROBE, RunningProbe, wait_for


def test_a_hook_is_killed_at_its_timeout_with_its_output_kept() -> None:
    run = run_hook("inject", Hook(command="echo started; sleep 30", timeout=0.5))
    assert run.exit_code is None
    assert run.output == "started\n"
    assert run.seconds < 5
    done = run_hook("heal", Hook(command="echo healed; exit 3", timeout=5))
    assert (done.exit_code, done.output) == (3, "healed\n")


@pytest.mark.gameday
@pytest.mark.broker
def test_staging_mode_runs_the_users_hooks_and_reads_their_prometheus(
    tmp_path: Path,
    own_broker: EmbeddedBroker,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
) -> None:
    config = tmp_path / "probe.yaml"
    config.write_text(yaml.safe_dump({**LIVE_PROBE, "metrics": {"host": "127.0.0.1"}}))
    probe = start_probe(
        "--config", str(config), "--bootstrap-servers", own_broker.bootstrap_servers,
        "--topic", topic, "--signing-key-file", str(key_file), "--probe-id", "staging-probe",
    )  # fmt: skip
    wait_for(lambda: probe.canaries("delivered") >= 6, timeout=60, what="canaries delivered")
    workdir = tmp_path / "prometheus"
    workdir.mkdir()
    with LocalPrometheus(
        workdir, probe_port=probe.port, rules_file=SHIPPED_RULES, interval=1.0
    ) as prometheus:
        wait_for(
            lambda: prometheus.api.query('up{job="synthetic-sla-probe"} == 1'),
            timeout=30,
            what="the probe scraped",
        )
        pid = own_broker._process.pid  # type: ignore[union-attr]
        scenario = {
            "name": "staging-freeze",
            "mode": "staging",
            "phases": {"steady": "10s", "fault": "15s", "recovery": "15s"},
            "fault": {"kind": "hooks"},
            "staging": {
                "prometheus_url": f"http://127.0.0.1:{prometheus.port}",
                "poll_interval": "500ms",
                "inject": {"command": f"echo freezing; kill -STOP {pid}", "timeout": "5s"},
                "heal": {"command": f"kill -CONT {pid} && echo thawed", "timeout": "5s"},
            },
            "expect": {
                "fire": [
                    {
                        "alert": "SyntheticSlaAvailabilityBudgetBurn",
                        "labels": {"severity": "critical"},
                        "within": "2m",
                    }
                ],
                "forbid": ["SyntheticSlaProbeDown"],
                "no_other_alerts": False,
            },
        }
        path = tmp_path / "staging.yaml"
        path.write_text(yaml.safe_dump(scenario))
        result = subprocess.run(
            [SLA_PROBE, "gameday", str(path), "--json"],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
    report = json.loads(result.stdout)
    assert report["ok"], (report["failures"], result.stderr)
    assert result.returncode == 0
    hooks = {hook["name"]: hook for hook in report["hooks"]}
    assert hooks["inject"]["output"] == "freezing\n"
    assert hooks["heal"]["output"] == "thawed\n"
    assert hooks["inject"]["exit_code"] == 0
    (page,) = report["alerts"]
    assert page["live"]["fired"]
    assert page["computed"]["fired"]
    assert page["computed"]["to_firing_s"] <= 120

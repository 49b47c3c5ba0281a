"""`sla-probe gameday` end to end: exit codes, a scenario that expects too much, and
two scenarios for real (embedded broker or Apache Kafka's three-broker cluster, `sla-probe
run`, Prometheus with the shipped rules, promtool): one broker stopped, which pages, and
a rolling restart of the cluster, which must page nobody and lose nothing. Those two
are slow game days (4.5 min together): `make gameday` runs them, `make test` does not.

Every other scenario runs in `make gameday`, which runs each one with its own
expectations (the scenario's `expect:`); its faults are tested one by one in
test_faults.py and test_kafka_cluster_faults.py, and the alerts they raise in
tests/rules with promtool. The embedded scenario is under a minute of live time plus
a few seconds of replay; the one on Apache Kafka about 2.5 minutes.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from probe.apache_kafka.cluster import kafka_version
from tests.conftest import SLA_PROBE

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"


def _gameday(
    *args: str, timeout: float = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SLA_PROBE, "gameday", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
        env=None if env is None else {**os.environ, **env},
    )


def test_a_bad_scenario_exits_2_with_one_line_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nfault: {kind: broker-stop}\nphases: {fault: soon}\n")
    result = _gameday(str(bad))
    assert result.returncode == 2
    assert result.stderr == (
        "sla-probe: config error: phases.fault: not a duration: 'soon' "
        "(use e.g. 500ms, 20s, 1m30s)\n"
    )
    missing = _gameday(str(tmp_path / "missing.yaml"))
    assert missing.returncode == 2
    assert missing.stderr.startswith("sla-probe: config error: config: cannot read ")


def test_every_shipped_scenario_is_valid() -> None:
    from probe.gameday.scenario import load_scenario  # noqa: PLC0415

    names = set()
    for path in sorted(SCENARIOS.glob("*.yaml")):
        scenario = load_scenario(path)
        assert scenario.name == path.stem, path
        names.add(scenario.name)
    assert "staging-example" in names


def test_a_cluster_scenario_without_kafkas_jars_says_to_run_make_kafka(tmp_path: Path) -> None:
    result = _gameday(
        str(SCENARIOS / "kafka-broker-stop.yaml"),
        env={"SLA_PROBE_KAFKA_LIBS": str(tmp_path / "no-jars")},
        timeout=60,
    )
    assert result.returncode == 1
    libs = tmp_path / "no-jars" / f"apache-kafka-{kafka_version()}"
    assert result.stderr.splitlines()[-1] == (
        "sla-probe: gameday kafka-broker-stop: broker: apache-kafka needs Apache Kafka's "
        f"jars, not in {libs}: run `make kafka` "
        "(python -m probe.apache_kafka install) first"
    )


def _fired_by_stage(report: dict[str, Any]) -> set[tuple[str, str | None]]:
    """(alert name, stage label) of every alert the replay fired."""
    return {
        (alert["alert"], alert["labels"].get("stage"))
        for alert in report["alerts"]
        if alert["computed"]["fired"]
    }


def _run(name: str, workdir: Path, timeout: float = 240) -> dict[str, Any]:
    result = _gameday(
        str(SCENARIOS / f"{name}.yaml"), "--json", "--workdir", str(workdir), timeout=timeout
    )
    assert result.stdout, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    assert result.returncode == (0 if report["ok"] else 1)
    # A failed game day shows what the probe said: in CI its files are gone after.
    assert report["ok"], json.dumps(report["failures"], indent=1) + _logs_tail(workdir)
    assert report["figures"]["live"].startswith("observed")
    assert report["figures"]["computed"].startswith("computed")
    return report


def _logs_tail(workdir: Path, lines: int = 60) -> str:
    """The last lines of every log of the run, each named."""
    return "".join(
        f"\n--- {log.relative_to(workdir)}:\n"
        + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
        for log in sorted(workdir.glob("*/*.log"))
    )


@pytest.mark.gameday
@pytest.mark.broker
def test_broker_stop_pages_within_an_interval_plus_timeout_and_resolves(tmp_path: Path) -> None:
    report = _run("broker-stop", tmp_path)
    by_alert = {(a["alert"], a["labels"].get("partition")): a for a in report["alerts"]}
    page = by_alert["SyntheticSlaAvailabilityBudgetBurn", None]
    assert page["live"]["fired"]
    # 1 interval (20 s) + send timeout (10 s) + no `for`, to the evaluation step.
    assert page["computed"]["to_firing_s"] <= 100
    for partition in "012":
        silent = by_alert["SyntheticSlaPartitionSilent", partition]
        assert silent["computed"]["fired"]
        assert silent["computed"]["labels"]["partition"] == partition
    assert report["false_pages"]["computed"] == []
    assert report["resolved"]["computed"]["ok"]


@pytest.mark.broker
def test_an_unmet_expectation_exits_1_and_a_table_run_says_which(tmp_path: Path) -> None:
    # A probe restart pages nothing, so an availability page expected of it never comes.
    scenario = tmp_path / "expects-too-much.yaml"
    scenario.write_text(
        "name: expects-too-much\n"
        "phases: {steady: 5s, fault: 2s, recovery: 5s}\n"
        "production: {replay: false}\n"
        "fault: {kind: probe-restart}\n"
        "expect:\n"
        "  fire: [{alert: SyntheticSlaAvailabilityBudgetBurn, live: true}]\n"
    )
    result = _gameday(str(scenario), "--markdown")
    assert result.returncode == 1, result.stderr
    assert "| expects-too-much | SyntheticSlaAvailabilityBudgetBurn | not fired" in result.stdout
    assert "FAIL: SyntheticSlaAvailabilityBudgetBurn" in result.stderr
    assert "result: FAIL" in result.stderr


# --- Apache Kafka's three-broker cluster (broker: apache-kafka; `make kafka`) ------------


@pytest.mark.gameday
def test_a_rolling_restart_of_the_kafka_cluster_pages_nobody_and_loses_no_canary(
    tmp_path: Path,
) -> None:
    # A cluster to start besides the game day: under 2.5 min here, 3 on a busy machine.
    report = _run("kafka-rolling-restart", tmp_path, timeout=285)
    assert report["false_pages"]["computed"] == []
    assert report["canaries"]["lost"] == 0
    assert report["canaries"]["delivered"] > 0
    assert report["resolved"]["computed"]["ok"]


@pytest.mark.gameday
@pytest.mark.parametrize(
    "scenario", ["kafka-group-coordinator-stop", "kafka-group-consumer-coordinator-stop"]
)
def test_each_group_protocol_follows_its_coordinator_away_paging_nobody(
    tmp_path: Path, scenario: str
) -> None:
    # The broker coordinating the stage's group, asked of the cluster at injection, is
    # the one stopped; the member follows the group to the next coordinator.
    report = _run(scenario, tmp_path, timeout=285)
    assert report["false_pages"]["computed"] == []
    assert report["canaries"]["lost"] == 0
    assert report["canaries"]["delivered"] > 0
    assert report["resolved"]["computed"]["ok"]
    (steps,) = tmp_path.glob("**/faults.log")
    assert "is coordinated by broker" in steps.read_text()


# The scenario's phases alone are 255 s; with the cluster's start and the replay it runs
# past pytest's default 300 s on a loaded machine. The run's own bound (480 s) is the one
# that should end it, so pytest's is set above it.
@pytest.mark.timeout(540)
@pytest.mark.gameday
def test_commits_held_by_the_consumer_protocols_coordinator_page_that_stage_alone(
    tmp_path: Path,
) -> None:
    # The fault only the group_consumer stage meets (KIP-848): its coordinator's broker,
    # asked of the cluster at injection, forwards every OffsetCommit 2 s late. Its own
    # commit-latency page fires (the scenario's expectation); nothing of the consumer
    # stage's does, and no canary is late or lost.
    report = _run("kafka-group-consumer-commit-stall", tmp_path, timeout=480)
    fired = _fired_by_stage(report)
    assert ("SyntheticSlaGroupCommitLatencyBudgetBurn", "group_consumer") in fired
    assert report["false_pages"]["computed"] == []
    assert report["canaries"]["lost"] == report["canaries"]["late"] == 0
    (steps,) = tmp_path.glob("**/faults.log")
    assert "is coordinated by broker" in steps.read_text()


# MirrorMaker 2's own start and the backlog it copies after its restart: the phases
# (180 s) and the environment's two clusters and mirror run past pytest's default.
@pytest.mark.timeout(540)
@pytest.mark.gameday
def test_a_stopped_mirror_pages_the_mirror_stage_alone_and_loses_nothing(tmp_path: Path) -> None:
    # MirrorMaker 2 stopped for the fault: the mirror stage's partitions go silent and
    # page (the scenario's expectation); no alert of any other stage fires, and once
    # the mirror is back it copies the backlog: late at the mirror stage, none lost.
    report = _run("mirror-stop", tmp_path, timeout=480)
    fired = _fired_by_stage(report)
    assert ("SyntheticSlaPartitionSilent", "mirror") in fired
    assert report["false_pages"]["computed"] == []
    assert report["canaries"]["lost"] == 0
    assert report["canaries"]["late"] > 0

"""`once --junit`: the report as JUnit XML, valid by Jenkins' JUnit schema (the one CI
systems read; tests/junit_schema.py, `make junit-schema`), pure and from the command."""

from __future__ import annotations

import subprocess
from pathlib import Path

import xmlschema
from junitparser import Error, Failure, JUnitXml

from probe.core.judge import Outcome
from probe.embedded import free_loopback_port
from probe.services.junit_report import junit_xml
from probe.services.report import FAILING_PARTITIONS_LISTED, Report, StageTally, Tally
from tests.conftest import SLA_PROBE
from tests.junit_schema import schema_path


def valid(path: Path) -> JUnitXml:
    schema = xmlschema.XMLSchema(str(schema_path()))
    schema.validate(str(path))
    return JUnitXml.fromfile(str(path))


def passing_stage() -> StageTally:
    stage = StageTally()
    stage.outcomes[Outcome.DELIVERED.value] = 9
    stage.latencies_ms += [3.0] * 9
    return stage


def failing_stage(partitions: int) -> StageTally:
    stage = StageTally()
    stage.outcomes[Outcome.DELIVERED.value] = 7
    for partition in range(partitions):
        stage.outcomes[Outcome.LOST.value] += 1
        stage.note_failing(partition, Outcome.LOST.value, broker=partition % 3 + 1)
    stage.anomalies["duplicate"] = 1
    return stage


def test_a_case_per_target_and_stage_and_failing_partition(tmp_path: Path) -> None:
    kafka = Tally("orders", stages={"consumer": passing_stage(), "sink": failing_stage(2)})
    mqtt = Tally("mqtt", error="cannot connect to mqtt:8883: connection refused")
    path = tmp_path / "report.xml"
    junit_xml(Report([kafka, mqtt]), duration_s=12.3456).write(str(path), pretty=True)
    xml = valid(path)
    suites = {suite.name: suite for suite in xml}
    assert set(suites) == {"sla-probe once: orders", "sla-probe once: mqtt"}
    cases = {case.name: case for case in suites["sla-probe once: orders"]}
    assert set(cases) == {"consumer", "sink", "sink partition 0 (broker 1)",
                          "sink partition 1 (broker 2)"}  # fmt: skip
    assert cases["consumer"].is_passed
    assert cases["consumer"].classname == "synthetic-sla.orders"
    (failure,) = cases["sink"].result
    assert isinstance(failure, Failure)
    assert failure.message == "sink: 2 lost, 1 duplicate (7 of 9 delivered)"
    (partition,) = cases["sink partition 1 (broker 2)"].result
    assert partition.message == "1 (broker 2): 1 lost"
    (connect,) = suites["sla-probe once: mqtt"]
    (error,) = connect.result
    assert isinstance(error, Error)
    assert error.message == "cannot connect to mqtt:8883: connection refused"
    assert (xml.tests, xml.failures, xml.errors) == (5, 3, 1)


def test_a_broker_down_on_many_partitions_lists_the_worst_not_all(tmp_path: Path) -> None:
    tally = Tally("orders", stages={"consumer": failing_stage(10_000)})
    path = tmp_path / "report.xml"
    junit_xml(Report([tally]), duration_s=1.0).write(str(path))
    (suite,) = valid(path)
    assert len(list(suite)) == 1 + FAILING_PARTITIONS_LISTED
    assert path.stat().st_size < 20_000


def test_once_writes_it_beside_its_report(tmp_path: Path) -> None:
    path = tmp_path / "sla-probe.xml"
    done = subprocess.run(
        [SLA_PROBE, "once", "--embedded", "--junit", str(path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (suite,) = valid(path)
    assert [case.name for case in suite] == ["consumer"]
    assert all(case.is_passed for case in suite)

    nowhere = f"127.0.0.1:{free_loopback_port()}"
    failed = subprocess.run(
        [SLA_PROBE, "once", "--bootstrap-servers", nowhere, "--send-timeout", "1s",
         "--junit", str(path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert failed.returncode == 1
    (suite,) = valid(path)
    (connect,) = [case for case in suite if case.name == "connect"]
    (error,) = connect.result
    assert error.message.startswith(f"cannot connect to {nowhere}: connection refused")


def test_a_file_it_could_not_write_is_said_before_the_run(tmp_path: Path) -> None:
    done = subprocess.run(
        [SLA_PROBE, "once", "--embedded", "--junit", str(tmp_path / "no" / "such.xml")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == (
        f"sla-probe: config error: --junit: {tmp_path / 'no' / 'such.xml'}: "
        f"no directory {tmp_path / 'no'}\n"
    )

"""`once --junit FILE`: the report as JUnit XML, the test report CI systems display
(GitLab, Jenkins, GitHub Actions, Buildkite).

One test suite per target, and in it one test case per stage, passed or failed with
the stage's verdict, plus one failed case per failing partition (the worst
FAILING_PARTITIONS_LISTED of them: a broker down on 10,000 partitions must not make
10,000 cases), naming its leader broker. A target that could not be probed at all (an
unreachable broker, a missing topic) is one case in error, with the reason::

    >>> junit_xml(report, duration_s=4.2).write("sla-probe.xml", pretty=True)

The file validates against Jenkins' JUnit schema (junit-10.xsd), which GitLab and the
others read alike. Pure: the caller writes the file.
"""

from __future__ import annotations

from junitparser import Error, Failure, JUnitXml, TestCase, TestSuite

from probe.core.judge import AnomalyKind, Outcome
from probe.services.report import FAILING_PARTITIONS_LISTED, Report, StageTally, Tally

# Counted on a stage, not failing it: another probe's canaries on a shared topic.
_HARMLESS = frozenset({AnomalyKind.FOREIGN.value})


def _seconds(value: float) -> float:
    """The schema's time: at most three decimals."""
    return round(value, 3)


def stage_problems(tally: StageTally) -> list[str]:
    """What failed a stage, in words: ``["3 lost", "1 duplicate", "2 invalid"]``."""
    problems = [
        f"{tally.outcomes[outcome.value]} {outcome.value}"
        for outcome in Outcome
        if outcome is not Outcome.DELIVERED and tally.outcomes[outcome.value]
    ]
    problems += [
        f"{count} {kind}"
        for kind, count in sorted(tally.anomalies.items())
        if count and kind not in _HARMLESS
    ]
    invalid = sum(tally.invalid.values())
    if invalid:
        reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(tally.invalid.items()) if n)
        problems.append(f"{invalid} invalid ({reasons})")
    if not tally.outcomes[Outcome.DELIVERED.value]:
        problems.append("no canary delivered")
    return problems


def _stage_case(target: str, stage: str, tally: StageTally, duration_s: float) -> TestCase:
    case = TestCase(stage, classname=f"synthetic-sla.{target}", time=_seconds(duration_s))
    if not tally.ok:
        delivered = tally.outcomes[Outcome.DELIVERED.value]
        total = sum(tally.outcomes.values())
        failure = Failure(
            f"{stage}: {', '.join(stage_problems(tally))} ({delivered} of {total} delivered)",
            type_="slo",
        )
        case.result = [failure]
    return case


def _partition_cases(target: str, stage: str, tally: StageTally) -> list[TestCase]:
    cases = []
    for failing in tally.worst_partitions()[:FAILING_PARTITIONS_LISTED]:
        leader = "" if failing.broker is None else f" (broker {failing.broker})"
        case = TestCase(
            f"{stage} partition {failing.partition}{leader}",
            classname=f"synthetic-sla.{target}",
            time=0.0,
        )
        case.result = [Failure(failing.describe(), type_="partition")]
        cases.append(case)
    return cases


def target_suite(tally: Tally, duration_s: float) -> TestSuite:
    suite = TestSuite(f"sla-probe once: {tally.target}")
    if tally.error is not None:
        case = TestCase("connect", classname=f"synthetic-sla.{tally.target}", time=0.0)
        case.result = [Error(tally.error, type_="unprobed")]
        suite.add_testcase(case)
    for stage, stage_tally in sorted(tally.stages.items()):
        suite.add_testcase(_stage_case(tally.target, stage, stage_tally, duration_s))
        for case in _partition_cases(tally.target, stage, stage_tally):
            suite.add_testcase(case)
    suite.time = _seconds(duration_s)
    return suite


def junit_xml(report: Report, duration_s: float) -> JUnitXml:
    """The whole report: one suite per target, the totals updated."""
    xml = JUnitXml("synthetic-sla-probe once")
    suites = [target_suite(tally, duration_s) for tally in report.tallies]
    for suite in suites:
        suite.update_statistics()  # type: ignore[no-untyped-call]  # untyped in junitparser
        xml.add_testsuite(suite)
    # The totals set by hand: junitparser's own also write `skipped`, which Jenkins'
    # schema does not allow on <testsuites>.
    xml.tests = sum(suite.tests for suite in suites)
    xml.failures = sum(suite.failures for suite in suites)
    xml.errors = sum(suite.errors for suite in suites)
    xml.time = _seconds(duration_s)
    return xml

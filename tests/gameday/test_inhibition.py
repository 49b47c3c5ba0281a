"""Alertmanager's inhibition applied to alert timelines: the documented rules, what
they mute and when an alert reaches a person. (The same rules in a real Alertmanager,
and this module agreeing with it: tests/test_slo_rules.py.)"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from probe.gameday.inhibition import (
    InhibitRulesError,
    documented_inhibit_rules,
    notified_spans,
    parse_matcher,
)
from probe.gameday.scenario import Expectations, ExpectedAlert
from probe.gameday.timeline import ObservedAlert, Timeline
from probe.gameday.verdict import PhaseTimes, judge

RULES = documented_inhibit_rules()
SILENT_SINK = {
    "alertname": "SyntheticSlaPartitionSilent",
    "target": "kafka",
    "stage": "sink",
    "partition": "1",
    "severity": "critical",
}
SKEW_PAGE = {
    "alertname": "SyntheticSlaWatermarkSkewBudgetBurn",
    "target": "kafka",
    "slo": "watermark_skew",
    "severity": "critical",
}


def test_matchers_are_anchored_like_alertmanagers() -> None:
    burn = parse_matcher('alertname=~"SyntheticSla(Availability|Latency)BudgetBurn"')
    assert burn.matches({"alertname": "SyntheticSlaLatencyBudgetBurn"})
    assert not burn.matches({"alertname": "XSyntheticSlaLatencyBudgetBurnX"})
    assert parse_matcher('severity!="critical"').matches({})  # absent is empty
    assert parse_matcher('stage!~"sink|mqtt"').matches({"stage": "consumer"})
    with pytest.raises(InhibitRulesError, match="not a matcher"):
        parse_matcher("severity=critical")


def test_the_documented_rules_are_read_from_alerting_md(tmp_path: Path) -> None:
    assert len(RULES) == 2
    assert all("target" in rule.equal for rule in RULES)
    with pytest.raises(InhibitRulesError, match="no inhibit_rules block"):
        documented_inhibit_rules(tmp_path / "missing.md")


def _timeline(*snapshots: tuple[float, list[dict[str, str]]]) -> Timeline:
    timeline = Timeline()
    for at, alerts in snapshots:
        timeline.observe(at, [ObservedAlert(labels, "firing") for labels in alerts])
    return timeline


def test_a_silent_partition_mutes_the_skew_page_of_its_target_until_it_resolves() -> None:
    other_target = {**SKEW_PAGE, "target": "payments"}
    timeline = _timeline(
        (0.0, []),
        (60.0, [SILENT_SINK]),
        (600.0, [SILENT_SINK, SKEW_PAGE, other_target]),
        (700.0, [SKEW_PAGE, other_target]),
        (1000.0, [other_target]),
    )
    tracks = {track.labels["target"] + track.name: track for track in timeline.tracks}
    skew = tracks["kafkaSyntheticSlaWatermarkSkewBudgetBurn"]
    assert notified_spans(skew, timeline.tracks, RULES) == [(700.0, 1000.0)]
    # Another pipeline's skew is its own news; the silent partition itself pages.
    payments = tracks["paymentsSyntheticSlaWatermarkSkewBudgetBurn"]
    assert notified_spans(payments, timeline.tracks, RULES) == [(600.0, math.inf)]
    silent = tracks["kafkaSyntheticSlaPartitionSilent"]
    assert notified_spans(silent, timeline.tracks, RULES) == [(60.0, 700.0)]


def test_a_ticket_muted_by_its_page_for_as_long_as_it_fired_is_no_false_page() -> None:
    page = {
        "alertname": "SyntheticSlaAvailabilityBudgetBurn",
        "target": "kafka",
        "stage": "consumer",
        "severity": "critical",
    }
    ticket = {**page, "severity": "warning"}
    timeline = _timeline(
        (0.0, []), (100.0, [page]), (140.0, [page, ticket]), (300.0, [page]), (400.0, [])
    )
    expect = Expectations(
        fire=(ExpectedAlert(alert="SyntheticSlaAvailabilityBudgetBurn", labels={}),),
        no_other_alerts=True,
    )
    phases = PhaseTimes(start=0.0, fault=50.0, recovery=200.0, end=400.0)
    verdict = judge(
        expect, timeline, phases, check_within=False, check_resolution=False, inhibit_rules=RULES
    )
    (fired,) = verdict.alerts
    assert (fired.to_firing, fired.to_notified) == (50.0, 50.0)
    assert verdict.false_pages == []
    assert verdict.muted == [ticket]
    # Without the rules, the same timeline judges the ticket as it did before: it fired.
    plain = judge(Expectations(no_other_alerts=True), timeline, phases, check_within=False,
                  check_resolution=False)  # fmt: skip
    assert [p.labels["severity"] for p in plain.false_pages] == ["critical", "warning"]
    assert plain.muted == []


def test_an_expected_alert_muted_at_first_says_when_it_reached_a_person() -> None:
    timeline = _timeline((0.0, [SILENT_SINK]), (600.0, [SILENT_SINK, SKEW_PAGE]),
                         (700.0, [SKEW_PAGE]), (800.0, []))  # fmt: skip
    expect = Expectations(fire=(ExpectedAlert(alert="SyntheticSlaWatermarkSkewBudgetBurn"),))
    phases = PhaseTimes(start=0.0, fault=0.0, recovery=700.0, end=800.0)
    verdict = judge(
        expect, timeline, phases, check_within=False, check_resolution=False, inhibit_rules=RULES
    )
    (skew,) = verdict.alerts
    assert (skew.to_firing, skew.to_notified) == (600.0, 700.0)

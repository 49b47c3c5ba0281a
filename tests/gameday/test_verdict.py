"""The timeline and the verdict: table-driven, on hand-written snapshots."""

from __future__ import annotations

from probe.gameday.scenario import AlertMatcher, Expectations, ExpectedAlert
from probe.gameday.timeline import ObservedAlert, Timeline
from probe.gameday.verdict import PhaseTimes, judge

PAGE = {"alertname": "Page", "stage": "consumer", "severity": "critical"}
TICKET = {"alertname": "Ticket", "severity": "warning"}
PHASES = PhaseTimes(start=0.0, fault=100.0, recovery=200.0, end=1000.0)


def _timeline(snapshots: dict[float, list[ObservedAlert]], until: float = 1000.0) -> Timeline:
    timeline = Timeline()
    at = 0.0
    while at <= until:
        timeline.observe(at, snapshots.get(at, []))
        at += 20.0
    return timeline


def _active(labels: dict[str, str], state: str, active_at: float | None = None) -> ObservedAlert:
    return ObservedAlert(labels=labels, state=state, active_at=active_at)  # type: ignore[arg-type]


def test_an_expected_alert_is_timed_from_fault_start_to_pending_and_firing() -> None:
    snapshots = {
        # Pending since 130 (the server's activeAt, between two polls), firing from 160 to 240.
        140.0: [_active(PAGE, "pending", active_at=130.0)],
        160.0: [_active(PAGE, "firing", active_at=130.0)],
        180.0: [_active(PAGE, "firing", active_at=130.0)],
        200.0: [_active(PAGE, "firing", active_at=130.0)],
        220.0: [_active(PAGE, "firing", active_at=130.0)],
    }
    expect = Expectations(
        fire=(ExpectedAlert(alert="Page", labels={"stage": "consumer"}, within=90.0),),
        resolve_within=60.0,
    )
    verdict = judge(expect, _timeline(snapshots), PHASES, check_within=True, check_resolution=True)
    (result,) = verdict.alerts
    assert (result.fired, result.to_pending, result.to_firing, result.in_time) == (
        True,
        30.0,
        60.0,
        True,
    )
    assert verdict.false_pages == []
    assert verdict.resolution is not None
    assert verdict.resolution.ok
    assert verdict.resolution.after == 40.0  # gone at the 240 s snapshot


def test_labels_decide_the_match_and_late_firing_fails_within() -> None:
    snapshots = {300.0: [_active(PAGE, "firing")]}
    expect = Expectations(
        fire=(
            ExpectedAlert(alert="Page", labels={"stage": "sink"}),
            ExpectedAlert(alert="Page", within=100.0),
        )
    )
    verdict = judge(expect, _timeline(snapshots), PHASES, check_within=True, check_resolution=True)
    wrong_stage, late = verdict.alerts
    assert not wrong_stage.fired
    assert late.fired
    assert late.to_firing == 200.0
    assert late.in_time is False


def test_false_pages_pending_does_not_page_and_tolerated_alerts_do_not_count() -> None:
    snapshots = {
        40.0: [_active(TICKET, "firing")],  # during steady state
        120.0: [_active({"alertname": "Other"}, "pending")],  # never fired
        140.0: [_active({"alertname": "Forbidden"}, "firing")],
    }
    expect = Expectations(
        forbid=("Forbidden",),
        tolerate=(AlertMatcher(alert="Ticket", labels={"severity": "warning"}),),
    )
    verdict = judge(expect, _timeline(snapshots), PHASES, check_within=True, check_resolution=True)
    assert [(p.labels["alertname"], p.at, p.forbidden) for p in verdict.false_pages] == [
        ("Forbidden", 40.0, True)
    ]
    strict = judge(Expectations(), _timeline(snapshots), PHASES, check_within=True,
                   check_resolution=False)  # fmt: skip
    assert sorted(p.labels["alertname"] for p in strict.false_pages) == ["Forbidden", "Ticket"]
    assert strict.false_pages[0].at == -60.0 or strict.false_pages[1].at == -60.0


def test_an_alert_active_past_the_bound_fails_resolution_and_a_short_run_cannot_tell() -> None:
    firing = [_active(PAGE, "firing")]
    snapshots = {at: firing for at in (200.0, 220.0, 240.0, 260.0, 280.0, 300.0)}
    expect = Expectations(fire=(ExpectedAlert(alert="Page"),), resolve_within=60.0)
    verdict = judge(expect, _timeline(snapshots), PHASES, check_within=True, check_resolution=True)
    assert verdict.resolution is not None
    assert verdict.resolution.ok is False
    assert verdict.resolution.still_active == [PAGE]
    short = judge(
        expect, _timeline(snapshots, until=240.0), PHASES, check_within=True, check_resolution=True
    )
    assert short.resolution is not None
    assert short.resolution.ok is None

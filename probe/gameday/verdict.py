"""Judge a scenario's expectations on one alert timeline. Pure: times are arguments.

The same judgement runs on the live timeline (live seconds) and on the replay's
(production seconds); ``PhaseTimes`` says where the fault and the recovery start on
that timeline's clock, and every figure is relative to them in that clock.

- An expected alert *fired* when an alert matching its name and labels was firing at
  some point after the fault started; its times are from fault start to that
  episode's pending and firing.
- A *false page* is an alert that fired (pending alone pages nobody) and is forbidden,
  or, with ``no_other_alerts``, that no expectation and no ``tolerate`` names.
- With inhibit rules (Alertmanager's, ``probe.gameday.inhibition``), an alert reaches
  a person only while no firing alert mutes it: an expected alert's ``to_notified`` is
  from fault start to the first such moment (None: muted for as long as it fired), and
  an alert muted for as long as it fired is *muted*, never a false page.
- *Resolved* means every alert was inactive by ``recovery + resolve_within`` and none
  was active after that; unknown when the timeline ends before that bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from probe.gameday.inhibition import InhibitRule, notified_spans
from probe.gameday.scenario import Expectations, ExpectedAlert
from probe.gameday.timeline import AlertTrack, Timeline


@dataclass(frozen=True)
class PhaseTimes:
    start: float
    fault: float
    recovery: float
    end: float


@dataclass(frozen=True)
class AlertResult:
    expected: ExpectedAlert
    fired: bool
    # Seconds from fault start, in the timeline's clock; None when it did not fire.
    to_pending: float | None = None
    to_firing: float | None = None
    # The labels of the alert that matched (the first to fire).
    labels: dict[str, str] = field(default_factory=dict)
    # `within` held (None: not checked on this timeline).
    in_time: bool | None = None
    # Seconds from fault start to the first moment it fired unmuted (with inhibit rules;
    # None: muted for as long as it fired, or it did not fire).
    to_notified: float | None = None

    @property
    def ok(self) -> bool:
        return self.fired and self.in_time is not False


@dataclass(frozen=True)
class FalsePage:
    labels: dict[str, str]
    # Seconds from fault start to its first firing (negative: during steady state).
    at: float
    forbidden: bool


@dataclass(frozen=True)
class Resolution:
    # None: the timeline ends before the bound, so it cannot say.
    ok: bool | None
    # Seconds from recovery start to the last alert resolving (0 if none was active).
    after: float | None
    still_active: list[dict[str, str]] = field(default_factory=list)
    # Each alert active after recovery started, with seconds from recovery start to
    # its last resolution (None: still active at the end).
    alerts: list[tuple[dict[str, str], float | None]] = field(default_factory=list)


@dataclass(frozen=True)
class TimelineVerdict:
    alerts: list[AlertResult]
    false_pages: list[FalsePage]
    resolution: Resolution | None
    # Alerts that fired but were muted by an inhibit rule for as long as they fired.
    muted: list[dict[str, str]] = field(default_factory=list)


def judge(
    expect: Expectations,
    timeline: Timeline,
    phases: PhaseTimes,
    *,
    check_within: bool,
    check_resolution: bool,
    inhibit_rules: Sequence[InhibitRule] = (),
) -> TimelineVerdict:
    """The verdict of one timeline. ``within`` and the resolve bound are production
    times: check them only on a timeline in production seconds."""
    tracks = timeline.tracks
    notified = {id(track): notified_spans(track, tracks, inhibit_rules) for track in tracks}
    results = [_expected(e, tracks, phases, check_within, notified) for e in expect.fire]
    false_pages = [
        FalsePage(
            labels=track.labels,
            at=notified[id(track)][0][0] - phases.fault,
            forbidden=track.name in expect.forbid,
        )
        for track in tracks
        if notified[id(track)] and _unexpected(track, expect)
    ]
    muted = [track.labels for track in tracks if track.fired() and not notified[id(track)]]
    resolution = (
        _resolution(tracks, phases, expect.resolve_within, timeline.last_at)
        if check_resolution and expect.resolve_within is not None
        else None
    )
    return TimelineVerdict(results, false_pages, resolution, muted)


def _expected(
    expected: ExpectedAlert,
    tracks: list[AlertTrack],
    phases: PhaseTimes,
    check_within: bool,
    notified: dict[int, list[tuple[float, float]]],
) -> AlertResult:
    firings = [
        (episode, track)
        for track in tracks
        if expected.matches(track.labels)
        for episode in [track.first_firing(since=phases.fault)]
        if episode is not None and episode.firing_at is not None
    ]
    if not firings:
        return AlertResult(expected, fired=False, in_time=False if check_within else None)
    episode, track = min(firings, key=lambda pair: pair[0].firing_at or 0.0)
    assert episode.firing_at is not None
    to_firing = episode.firing_at - phases.fault
    in_time = None
    if check_within and expected.within is not None:
        in_time = to_firing <= expected.within
    reached = [start for start, end in notified[id(track)] if end > episode.firing_at]
    return AlertResult(
        expected,
        fired=True,
        to_pending=episode.start - phases.fault,
        to_firing=to_firing,
        labels=track.labels,
        in_time=in_time,
        to_notified=None if not reached else max(reached[0], episode.firing_at) - phases.fault,
    )


def _unexpected(track: AlertTrack, expect: Expectations) -> bool:
    if track.name in expect.forbid:
        return True
    if not expect.no_other_alerts or any(t.matches(track.labels) for t in expect.tolerate):
        return False
    return not any(expected.matches(track.labels) for expected in expect.fire)


def _resolution(
    tracks: list[AlertTrack], phases: PhaseTimes, bound: float, last_at: float | None
) -> Resolution:
    deadline = phases.recovery + bound
    active_in_recovery = [t for t in tracks if _active_after(t, phases.recovery)]
    still = [t.labels for t in active_in_recovery if _active_after(t, deadline)]
    ends = [e.end for t in active_in_recovery for e in t.episodes if e.end is not None]
    after = None if still else max(0.0, max(ends, default=phases.recovery) - phases.recovery)
    per_alert = [
        (t.labels, None if t.resolved_at is None else t.resolved_at - phases.recovery)
        for t in active_in_recovery
    ]
    if last_at is not None and last_at < deadline and still:
        # The timeline ends before the bound with an alert active: it may yet resolve.
        return Resolution(ok=None, after=None, still_active=still, alerts=per_alert)
    return Resolution(ok=not still, after=after, still_active=still, alerts=per_alert)


def _active_after(track: AlertTrack, at: float) -> bool:
    """Active at some moment after `at`."""
    return any(e.end is None or e.end > at for e in track.episodes)

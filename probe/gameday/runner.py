"""Run a scenario: phases on a live environment, the watcher, the replay, the verdict.

    steady ──────────► fault ─────────► recovery ──────────► end
           inject()            heal()

The phases are fixed durations (sleeping through a phase is the point: it is the
fault's duration, not a stand-in for a condition). The watcher polls the alerts API
throughout; afterwards the probe's series are read back and replayed at production
time. ``GamedayResult.ok`` holds when every expectation holds on the replay (the
production timing) and on the live run (the real alerting path) as the scenario asks.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from probe.core.errors import ProbeError
from probe.gameday.inhibition import InhibitRule
from probe.gameday.prometheus import PrometheusApi, RecordedSeries
from probe.gameday.replay import PROBE_SERIES, ReplayPlan, replay
from probe.gameday.scenario import Scenario
from probe.gameday.verdict import PhaseTimes, TimelineVerdict, judge
from probe.gameday.watcher import AlertSource, AlertWatcher


class FaultControl(Protocol):
    def inject(self) -> None: ...

    def heal(self) -> None: ...


@dataclass(frozen=True)
class HookRun:
    """A staging hook's run, for the report."""

    name: str
    command: str
    exit_code: int | None  # None: killed at its timeout
    seconds: float
    output: str


@dataclass
class GamedayResult:
    scenario: Scenario
    # Live phases on the wall clock; the replay's in production seconds.
    live_phases: PhaseTimes
    live: TimelineVerdict
    computed_phases: PhaseTimes | None = None
    computed: TimelineVerdict | None = None
    failed_polls: int = 0
    hooks: list[HookRun] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # A local run's canaries by outcome, every stage, as the probe counted them at the
    # end (None: not read, or the probe did not answer).
    canaries: dict[str, float] | None = None

    @property
    def ok(self) -> bool:
        return not self.failures()

    def failures(self) -> list[str]:
        """Every expectation that does not hold, as a sentence; empty when all hold."""
        failures = list(self.problems)
        expect = self.scenario.expect
        for index, live in enumerate(self.live.alerts):
            name = live.expected.alert
            if live.expected.live and not live.fired:
                failures.append(f"{name} did not fire in the live run")
            if self.computed is not None:
                computed = self.computed.alerts[index]
                if not computed.fired:
                    failures.append(f"{name} did not fire in the replay at production time")
                elif computed.in_time is False:
                    failures.append(
                        f"{name} fired {computed.to_firing:g}s after the fault in the replay, "
                        f"later than {live.expected.within:g}s"
                    )
            elif live.in_time is False:
                failures.append(f"{name} fired later than {live.expected.within:g}s")
        for source, verdict in self.judged_false_pages():
            for page in verdict.false_pages:
                failures.append(f"false page ({source}): {_describe(page.labels)}")
        if expect.max_lost is not None:
            lost = None if self.canaries is None else self.canaries.get("lost", 0.0)
            if lost is None:
                failures.append("the probe's lost canaries could not be read at the end")
            elif lost > expect.max_lost:
                failures.append(f"{lost:g} canaries lost, more than {expect.max_lost}")
        judged = self.computed or self.live
        if expect.resolve_within is not None and judged.resolution is not None:
            resolution = judged.resolution
            if resolution.ok is False:
                failures.append(
                    f"not resolved within {expect.resolve_within:g}s of recovery: "
                    + ", ".join(_describe(labels) for labels in resolution.still_active)
                )
            elif resolution.ok is None:
                failures.append("the run ended before the resolve bound: cannot tell")
        return failures

    def judged_false_pages(self) -> list[tuple[str, TimelineVerdict]]:
        """The timelines whose false pages fail the run.

        A compressed live run starts its own Prometheus: its 1 h to 3 d windows hold
        only the run's minute, so a handful of slow or lost canaries right after a
        fault is a large share of them and a burn alert can fire that production,
        with full windows, would not. With a replay, its false pages are the ones that
        count; the live ones are still reported, as live-only.
        """
        if self.computed is not None:
            return [("replay", self.computed)]
        return [("live", self.live)]


def _describe(labels: dict[str, str]) -> str:
    rest = ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "alertname")
    return f"{labels.get('alertname', '?')}{{{rest}}}"


class PhaseClock:
    """The wall-clock times of a run's phase boundaries, as they happen."""

    def __init__(self) -> None:
        self.start = time.time()
        self.fault = self.recovery = self.end = self.start
        # When injecting began: the steady phase ends there, not when the fault was in
        # place (a broker's controlled shutdown takes seconds, and its effects on the
        # canaries then are the fault's, not the steady state's).
        self.injecting = self.start

    def phases(self) -> PhaseTimes:
        return PhaseTimes(self.start, self.fault, self.recovery, self.end)


def run_phases(
    scenario: Scenario,
    fault: FaultControl,
    source: AlertSource,
    poll_interval: float,
    *,
    on_phase: ProgressCallback | None = None,
) -> tuple[PhaseClock, AlertWatcher]:
    """Steady, fault, recovery, watching alerts all along; returns times and the watcher."""
    phases = scenario.phases
    say = on_phase or (lambda _: None)
    watcher = AlertWatcher(source, poll_interval)
    watcher.start()
    clock = PhaseClock()
    try:
        say(f"steady state for {phases.steady:g}s")
        time.sleep(phases.steady)
        # A phase starts when the fault is in place (a stopped broker no longer
        # listens), or removed: injecting may take seconds (a broker given time to
        # shut down), and detection is timed from the fault, not from the request.
        say(f"injecting {scenario.fault.kind}")
        clock.injecting = time.time()
        fault.inject()
        clock.fault = time.time()
        say(f"fault in place for {phases.fault:g}s")
        time.sleep(phases.fault)
        say("healing")
        fault.heal()
        clock.recovery = time.time()
        say(f"healed; recovery for {phases.recovery:g}s")
        time.sleep(phases.recovery)
    finally:
        clock.end = time.time()
        watcher.stop()
    return clock, watcher


class ProgressCallback(Protocol):
    def __call__(self, message: str, /) -> None: ...


def record_series(
    api: PrometheusApi, start: float, end: float, step: float, selector: str = PROBE_SERIES
) -> list[RecordedSeries]:
    """The probe's raw series over the run, at the scrape step."""
    return api.query_range(selector, start, end, step)


def judge_run(
    scenario: Scenario,
    clock: PhaseClock,
    watcher: AlertWatcher,
    *,
    series: list[RecordedSeries] | None,
    live_step: float,
    rules_file: Path | None,
    workdir: Path,
    inhibit_rules: Sequence[InhibitRule] = (),
) -> GamedayResult:
    """Judge the live timeline and, with recorded series, the replay; with
    Alertmanager's inhibit rules, alerts are judged as they reach a person."""
    expect = scenario.expect
    production = scenario.production
    live_phases = clock.phases()
    # A live run at production pace (staging) has production times already.
    real_time = scenario.time_factor == 1.0
    live = judge(
        expect,
        watcher.timeline,
        live_phases,
        check_within=real_time,
        check_resolution=real_time or series is None,
        inhibit_rules=inhibit_rules,
    )
    result = GamedayResult(scenario, live_phases, live, failed_polls=watcher.failed_polls)
    if watcher.timeline.last_at is None:
        # Not one snapshot: the live run saw nothing, and "no alert" would be a lie.
        result.problems.append(f"the alerts API never answered ({watcher.last_error})")
    if series is None or rules_file is None:
        return result
    plan = ReplayPlan(
        live_start=clock.start,
        live_step=live_step,
        factor=scenario.time_factor,
        history=production.history,
        # The history continues the steady phase's rates, measured until injecting began.
        fault_start=clock.injecting,
        tail=production.tail,
    )
    timeline = replay(series, plan, clock.end, rules_file, workdir)
    computed_phases = PhaseTimes(
        start=plan.replay_time(clock.start),
        fault=plan.replay_time(clock.fault),
        recovery=plan.replay_time(clock.recovery),
        end=plan.replay_time(clock.end) + plan.tail_steps * plan.step,
    )
    result.computed_phases = computed_phases
    result.computed = judge(
        expect,
        timeline,
        computed_phases,
        check_within=True,
        check_resolution=True,
        inhibit_rules=inhibit_rules,
    )
    return result


@contextlib.contextmanager
def workspace(base: Path | None, name: str) -> Iterator[Path]:
    """A directory for the run's files (logs, configs, TSDB, the replay's test file)."""
    if base is not None:
        path = base / f"{name}-{int(time.time())}"
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix=f"gameday-{name}-") as tmp:
        yield Path(tmp)


class GamedayError(ProbeError):
    """The game day could not run (an environment that did not start, a hook refused)."""

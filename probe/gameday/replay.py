"""Honest timing: replay a live run's series at the production interval through promtool.

A live run compresses time (one canary a second instead of every 20 s), but the
shipped rules keep their production windows (5 m to 3 d) and ``for:`` durations, so
the live alert times are not what production would see. The replay computes those
exactly, with promtool's own rule engine evaluating the shipped rules file; nothing
here re-implements PromQL:

1. the probe's raw series are read back from the run's Prometheus (query_range at
   the scrape step);
2. time is stretched by ``factor`` = production interval / live interval: live second
   *i* becomes production time ``i x step x factor``; values that *are* durations on
   the probe's clock (staleness, watermark skew) are stretched too, counters and
   latencies are not (a canary's latency does not depend on how often canaries go);
3. ``history`` of healthy production time is prepended, extrapolated from the steady
   phase (counters grow at their steady rate, gauges keep their first value), so the
   1 h and 6 h windows are full when the live run starts, as in production;
4. one promtool unit test evaluates the rules over all of it and, at every evaluation
   step of the live part, expects ``ALERTS`` to be empty; promtool's failure output
   lists the alerts it got at each step (name, labels, pending or firing), which is
   parsed back into a ``Timeline`` in production seconds.
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from probe.core.errors import ProbeError
from probe.gameday.prometheus import RecordedSeries
from probe.gameday.timeline import AlertState, ObservedAlert, Timeline

# Gauges whose value is a duration on the probe's clock: stretched with time.
TIME_VALUED = frozenset(
    {
        "synthetic_sla_partition_staleness_seconds",
        "synthetic_sla_watermark_skew_seconds",
        "synthetic_sla_spark_seconds_since_last_batch",
    }
)
# Gauges whose value is a moment on the wall clock (seconds since the epoch), which the
# rules hold against time(): placed on the replay's clock as the live times are, and
# keeping up with it through the healthy history and tail.
TIMESTAMP_VALUED = frozenset({"synthetic_sla_mirror_heartbeat_timestamp_seconds"})
# The series the rules read: the probe's own, and the scrape health of its job.
PROBE_SERIES = '{__name__=~"synthetic_sla_.+|up"}'
_COUNTER_SUFFIXES = ("_total", "_bucket", "_count", "_sum")
# Samples at the end of the live run whose rate the tail continues.
_TAIL_BASIS = 10


class ReplayError(ProbeError):
    """promtool could not run the replay (not the alerts it found: those are results)."""


@dataclass(frozen=True)
class ReplayPlan:
    """Where the live run sits on the replay's clock.

    Live time ``t`` maps to replay time ``history + (t - live_start) x factor``.
    """

    live_start: float
    live_step: float
    factor: float
    history: float
    # Live time the fault starts being injected: the steady phase before it sets the
    # history's rates.
    fault_start: float
    # Healthy production time appended after the live run, extrapolated from its last
    # samples, so that alerts whose windows outlast the recovery phase can resolve.
    tail: float = 0.0

    @property
    def step(self) -> float:
        """The replay's scrape and evaluation interval, in production seconds."""
        return self.live_step * self.factor

    @property
    def history_steps(self) -> int:
        return round(self.history / self.step)

    @property
    def tail_steps(self) -> int:
        return round(self.tail / self.step)

    def replay_time(self, live: float) -> float:
        return self.history_steps * self.step + (live - self.live_start) * self.factor


def _is_counter(name: str) -> bool:
    return name.endswith(_COUNTER_SUFFIXES)


def _series_selector(labels: dict[str, str]) -> str:
    name = labels["__name__"]
    inner = ",".join(
        f'{key}="{_escape(value)}"' for key, value in sorted(labels.items()) if key != "__name__"
    )
    return f"{name}{{{inner}}}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


def series_values(series: RecordedSeries, plan: ReplayPlan, live_points: int) -> str:
    """promtool's expanding notation for one series: history, then the live samples."""
    scale = plan.factor if series.name in TIME_VALUED else 1.0
    stamps = series.name in TIMESTAMP_VALUED
    by_index: dict[int, float] = {}
    for at, value in series.samples:
        index = round((at - plan.live_start) / plan.live_step)
        if 0 <= index < live_points:
            by_index[index] = plan.replay_time(value) if stamps else value * scale
    live = [by_index.get(i) for i in range(live_points)]
    steady = [
        v for i, v in enumerate(live) if v is not None and _live_at(plan, i) < plan.fault_start
    ]
    # The last stretch without a gap: what the tail extrapolates.
    last: list[float] = []
    for sample in reversed(live):
        if sample is None:
            break
        last.insert(0, sample)
    last = last[-_TAIL_BASIS:]
    history = plan.history_steps
    parts: list[str] = []
    if stamps:
        step = _number(plan.step)
        if history:
            parts.append(f"0+{step}x{history - 1}")
        parts.extend("_" if value is None else _number(value) for value in live)
        if plan.tail_steps and last:
            parts.append(f"{_number(last[-1] + plan.step)}+{step}x{plan.tail_steps - 1}")
    elif _is_counter(series.name):
        rate = _steady_rate(steady)
        if steady and history:
            parts.append(f"0+{_number(rate)}x{history - 1}")
        elif history:
            parts.append(f"_x{history - 1}")
        # Shift the live values so they continue the history, up to the first reset
        # (a restarted probe starts from zero: rate() must see that reset as one).
        offset = history * rate - steady[0] if steady and history else 0.0
        previous: float | None = None
        for sample in live:
            if sample is None:
                parts.append("_")
                continue
            if previous is not None and sample < previous:
                offset = 0.0
            previous = sample
            parts.append(_number(sample + offset))
        if plan.tail_steps and last:
            rate = _steady_rate(last)
            parts.append(
                f"{_number(last[-1] + offset + rate)}+{_number(rate)}x{plan.tail_steps - 1}"
            )
    else:
        if history:
            parts.append(f"{_number(steady[0])}x{history - 1}" if steady else f"_x{history - 1}")
        parts.extend("_" if value is None else _number(value) for value in live)
        if plan.tail_steps and last:
            parts.append(f"{_number(last[-1])}x{plan.tail_steps - 1}")
    return " ".join(parts)


def _live_at(plan: ReplayPlan, index: int) -> float:
    return plan.live_start + index * plan.live_step


def _steady_rate(values: list[float]) -> float:
    """Per-step increase of a counter over the steady phase; 0 if it reset or is short."""
    if len(values) < 2 or any(b < a for a, b in itertools.pairwise(values)):
        return 0.0
    return (values[-1] - values[0]) / (len(values) - 1)


def build_unit_test(
    series: list[RecordedSeries], plan: ReplayPlan, live_points: int, rules_file: Path
) -> dict[str, Any]:
    """The promtool unit test file's contents."""
    first_check = plan.history_steps
    checks = [
        {
            "expr": "ALERTS",
            "eval_time": f"{_number((first_check + i) * plan.step)}s",
            "exp_samples": [],
        }
        for i in range(live_points + plan.tail_steps)
    ]
    return {
        "rule_files": [str(rules_file)],
        "evaluation_interval": f"{_number(plan.step)}s",
        "group_eval_order": rule_groups(rules_file),
        "tests": [
            {
                "name": "gameday replay",
                "interval": f"{_number(plan.step)}s",
                "input_series": [
                    {
                        "series": _series_selector(s.labels),
                        "values": series_values(s, plan, live_points),
                    }
                    for s in series
                    if s.samples
                ],
                "promql_expr_test": checks,
            }
        ],
    }


def rule_groups(rules_file: Path) -> list[str]:
    """The rule groups' names, in the file's order (recordings before the alerts that
    read them). Without an order promtool evaluates the groups of each step in a random
    order, so an alert read the step before's recordings in some runs and not others:
    the same recording computed a page 20 s apart. Prometheus runs groups on their own
    schedules, so a production alert may see a recording up to one evaluation interval
    late; the replay reports the figure with no such lag, the same in every run."""
    document = yaml.safe_load(rules_file.read_text())
    return [str(group["name"]) for group in document.get("groups", [])]


_CHECK = re.compile(r'expr: "ALERTS", time: (\S+?),\s*\n\s*exp: .*\n\s*got: (.*)')
_SAMPLE = re.compile(r"\{(.*?)\} [-+.\dEe]+(?:, |$)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def _go_duration(text: str) -> float:
    return sum(float(n) * _GO_UNITS[u] for n, u in _GO_DURATION.findall(text))


def parse_promtool_alerts(output: str) -> dict[float, list[ObservedAlert]]:
    """ALERTS per evaluation time (seconds) from promtool's failure output.

    A check that passed (no alert) is not printed: absent times had no alert.
    """
    found: dict[float, list[ObservedAlert]] = {}
    for when, got in _CHECK.findall(output):
        alerts = []
        for sample in _SAMPLE.findall(got):
            labels = {
                k: bytes(v, "utf-8").decode("unicode_escape") for k, v in _LABEL.findall(sample)
            }
            labels.pop("__name__", None)
            state: AlertState = "firing" if labels.pop("alertstate", "") == "firing" else "pending"
            alerts.append(ObservedAlert(labels=labels, state=state))
        found[round(_go_duration(when), 3)] = alerts
    return found


def run_promtool(unit_test: dict[str, Any], workdir: Path, timeout: float = 600.0) -> str:
    """Run the unit test; promtool's output (it fails whenever an alert was active)."""
    binary = shutil.which("promtool")
    if binary is None:
        raise ReplayError("promtool is not installed (Debian package `prometheus`)")
    path = workdir / "replay.test.yml"
    path.write_text(yaml.safe_dump(unit_test, sort_keys=False, width=1 << 20))
    try:
        result = subprocess.run(
            [binary, "test", "rules", str(path)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ReplayError(f"promtool did not finish the replay within {timeout:g}s") from None
    output = result.stdout + result.stderr
    # Every active alert fails a check and prints `got:`; a failure without one is
    # promtool refusing the test itself (a bad series, a bad rules file).
    if result.returncode != 0 and "got:" not in output:
        raise ReplayError(f"promtool could not run the replay: {output.strip()[-2000:]}")
    return output


def replay(
    series: list[RecordedSeries],
    plan: ReplayPlan,
    live_end: float,
    rules_file: Path,
    workdir: Path,
) -> Timeline:
    """The alert timeline production would have seen, in production seconds."""
    live_points = int((live_end - plan.live_start) / plan.live_step) + 1
    unit_test = build_unit_test(series, plan, live_points, rules_file.resolve())
    found = parse_promtool_alerts(run_promtool(unit_test, workdir))
    timeline = Timeline()
    for i in range(live_points + plan.tail_steps):
        at = round((plan.history_steps + i) * plan.step, 3)
        timeline.observe(at, found.get(at, []))
    return timeline

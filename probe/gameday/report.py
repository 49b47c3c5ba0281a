"""A game day's result as a terminal table, as JSON, and as rows of the detection table.

Every time is in seconds from fault start (resolution: from recovery start). Live
figures are wall-clock seconds of the compressed live run, observed on its own
Prometheus; computed figures are production seconds from the promtool replay. The
JSON says so in ``figures``, and each number sits under ``live`` or ``computed``.
"""

from __future__ import annotations

from typing import Any

from probe.gameday.runner import GamedayResult
from probe.gameday.verdict import AlertResult, Resolution, TimelineVerdict

FIGURES = {
    "live": (
        "observed: the alerts API of the Prometheus that evaluated the rules during the "
        "run; wall-clock seconds of the compressed live run (its rule windows are not "
        "compressed)"
    ),
    "computed": (
        "computed: the run's recorded series stretched to the production interval and "
        "evaluated with the same rules file by `promtool test rules`; production seconds"
    ),
}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _alert_json(result: AlertResult) -> dict[str, Any]:
    return {
        "fired": result.fired,
        "to_pending_s": _round(result.to_pending),
        "to_firing_s": _round(result.to_firing),
        "labels": result.labels,
        "in_time": result.in_time,
        # After Alertmanager's documented inhibition: when it first reached a person.
        "to_notified_s": _round(result.to_notified),
    }


def _resolution_json(resolution: Resolution | None) -> dict[str, Any] | None:
    if resolution is None:
        return None
    return {
        "ok": resolution.ok,
        "after_recovery_s": _round(resolution.after),
        "still_active": resolution.still_active,
        "alerts": [
            {"labels": labels, "resolved_after_recovery_s": _round(after)}
            for labels, after in resolution.alerts
        ],
    }


def _false_pages(verdict: TimelineVerdict | None) -> list[dict[str, Any]]:
    if verdict is None:
        return []
    return [
        {"labels": page.labels, "at_s": _round(page.at), "forbidden": page.forbidden}
        for page in verdict.false_pages
    ]


def to_json(result: GamedayResult) -> dict[str, Any]:
    scenario = result.scenario
    live_phases = result.live_phases
    alerts = []
    for index, live in enumerate(result.live.alerts):
        expected = live.expected
        alerts.append(
            {
                "alert": expected.alert,
                "labels": expected.labels,
                "within_s": expected.within,
                "must_fire_live": expected.live,
                "live": _alert_json(live),
                "computed": (
                    _alert_json(result.computed.alerts[index]) if result.computed else None
                ),
            }
        )
    return {
        "scenario": scenario.name,
        "mode": scenario.mode,
        "fault": scenario.fault.kind,
        "ok": result.ok,
        "failures": result.failures(),
        "figures": {
            "live": FIGURES["live"],
            "computed": FIGURES["computed"] if result.computed else None,
        },
        "live_interval_s": scenario.live_interval,
        "production_interval_s": scenario.production.interval,
        "time_factor": scenario.time_factor,
        "phases_live_s": {
            "steady": round(live_phases.fault - live_phases.start, 1),
            "fault": round(live_phases.recovery - live_phases.fault, 1),
            "recovery": round(live_phases.end - live_phases.recovery, 1),
        },
        "alerts": alerts,
        "false_pages": {
            "live": _false_pages(result.live),
            "computed": _false_pages(result.computed),
            "judged": [source for source, _ in result.judged_false_pages()],
        },
        # Fired, but muted by an inhibit rule for as long as they fired: no page.
        "muted": {
            "live": result.live.muted,
            "computed": result.computed.muted if result.computed else [],
        },
        "resolved": {
            "within_s": scenario.expect.resolve_within,
            "live": _resolution_json(result.live.resolution),
            "computed": _resolution_json(result.computed.resolution if result.computed else None),
        },
        # The probe's own counters at the end of a local run, every stage together.
        "canaries": result.canaries,
        "max_lost": scenario.expect.max_lost,
        "failed_polls": result.failed_polls,
        "hooks": [
            {
                "name": hook.name,
                "command": hook.command,
                "exit_code": hook.exit_code,
                "seconds": round(hook.seconds, 1),
                "output": hook.output,
            }
            for hook in result.hooks
        ],
    }


def _expected_name(alert: str, labels: dict[str, str]) -> str:
    text = ",".join(f"{k}={v}" for k, v in labels.items())
    return alert + (f"{{{text}}}" if text else "")


def _describe(labels: dict[str, str]) -> str:
    rest = ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "alertname")
    return f"{labels.get('alertname', '?')}{{{rest}}}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _fired(result: AlertResult | None) -> str:
    if result is None:
        return "-"
    return "yes" if result.fired else "NO"


def table(result: GamedayResult) -> str:
    """The terminal report."""
    scenario = result.scenario
    lines = [
        f"scenario {scenario.name} ({scenario.mode}, fault {scenario.fault.kind}): "
        f"live interval {scenario.live_interval:g}s, production {scenario.production.interval:g}s"
        f" (x{scenario.time_factor:g})",
        "times from fault start, s: live = observed on this run's Prometheus (live seconds);"
        " computed = promtool replay at production interval (production seconds)",
        "",
    ]
    names = [_expected_name(r.expected.alert, r.expected.labels) for r in result.live.alerts]
    width = max([len("alert"), *map(len, names)])
    header = (
        f"{'alert':<{width}} {'fired':>5} {'pend':>7} {'firing':>7} | "
        f"{'fired':>5} {'pend':>8} {'firing':>8} {'within':>7}"
    )
    lines += [f"{'':<{width}} {'live':^21} | {'computed':^31}", header]
    for index, live in enumerate(result.live.alerts):
        computed = result.computed.alerts[index] if result.computed else None
        expected = live.expected
        name = names[index]
        live_fired = _fired(live) + ("" if expected.live else "*")
        lines.append(
            f"{name:<{width}} {live_fired:>5} {_seconds(live.to_pending):>7} "
            f"{_seconds(live.to_firing):>7} | {_fired(computed):>5} "
            f"{_seconds(computed.to_pending if computed else None):>8} "
            f"{_seconds(computed.to_firing if computed else None):>8} "
            f"{_seconds(expected.within):>7}"
        )
    if any(not r.expected.live for r in result.live.alerts):
        lines.append("* not expected to fire live at the compressed interval")
    judged_ids = {id(verdict) for _, verdict in result.judged_false_pages()}
    for source, verdict in (("live", result.live), ("computed", result.computed)):
        if verdict is None:
            continue
        pages = verdict.false_pages
        note = "" if id(verdict) in judged_ids else ", partial windows: reported, not judged"
        lines.append(
            f"false pages ({source}{note}): "
            + (
                ", ".join(
                    f"{page.labels.get('alertname')} at {page.at:.1f}s"
                    + (" (forbidden)" if page.forbidden else "")
                    for page in pages
                )
                or "none"
            )
        )
    for source, verdict in (("live", result.live), ("computed", result.computed)):
        if verdict is not None and verdict.muted:
            lines.append(
                f"muted by inhibition ({source}, no page): "
                + ", ".join(_describe(labels) for labels in verdict.muted)
            )
    for index, live in enumerate(result.live.alerts):
        # An expected alert that fired while an inhibiting one muted it: say when it
        # reached a person, if it did.
        computed = result.computed.alerts[index] if result.computed else None
        for source, alert in (("live", live), ("computed", computed)):
            if alert is None or not alert.fired or alert.to_notified == alert.to_firing:
                continue
            reached = (
                "never notified"
                if alert.to_notified is None
                else f"notified at {alert.to_notified:.1f}s"
            )
            lines.append(
                f"{_expected_name(alert.expected.alert, alert.expected.labels)} ({source}): "
                f"muted by inhibition from firing, {reached}"
            )
    judged = result.computed or result.live
    if judged.resolution is not None:
        resolution = judged.resolution
        state = {True: "yes", False: "NO", None: "unknown"}[resolution.ok]
        lines.append(
            f"resolved within {scenario.expect.resolve_within:g}s of recovery "
            f"({'computed' if result.computed else 'live'}): {state}"
            + (
                f", last alert resolved {resolution.after:.1f}s after recovery"
                if resolution.after is not None
                else ""
            )
        )
        for alert_labels, after in resolution.alerts:
            lines.append(
                f"  {_describe(alert_labels)}: "
                + ("still active" if after is None else f"resolved {after:.1f}s after recovery")
            )
    if result.canaries is not None:
        counted = ", ".join(f"{k} {v:g}" for k, v in sorted(result.canaries.items()))
        bound = scenario.expect.max_lost
        lines.append(
            f"canaries (the probe's counters at the end, live): {counted or 'none'}"
            + ("" if bound is None else f"; at most {bound} lost")
        )
    for hook in result.hooks:
        code = "timed out" if hook.exit_code is None else f"exit {hook.exit_code}"
        lines.append(f"hook {hook.name}: `{hook.command}` {code} in {hook.seconds:.1f}s")
        lines += [f"  | {line}" for line in hook.output.splitlines()[-10:]]
    if result.failed_polls:
        lines.append(f"{result.failed_polls} polls of the alerts API failed")
    lines += [f"FAIL: {failure}" for failure in result.failures()]
    lines.append(f"result: {'PASS' if result.ok else 'FAIL'}")
    return "\n".join(lines)


def markdown_rows(result: GamedayResult) -> list[str]:
    """Rows of the detection table: one per expected alert, then false pages and
    resolution (the live false pages of a compressed run are counted, not judged)."""
    rows = []
    scenario = result.scenario
    for index, live in enumerate(result.live.alerts):
        computed = result.computed.alerts[index] if result.computed else None
        expected = live.expected
        labels = ", ".join(f"{k}={v}" for k, v in expected.labels.items())
        rows.append(
            f"| {scenario.name} | {expected.alert}{f' ({labels})' if labels else ''} "
            f"| {_cell(live)} | {_cell(computed)} "
            f"| {_seconds(expected.within) if expected.within else '-'} "
            f"| {'pass' if result.ok else 'FAIL'} |"
        )
    if scenario.expect.max_lost is not None:
        rows.append(_lost_row(result))
    rows.append(_quiet_row(result))
    return rows


def _lost_row(result: GamedayResult) -> str:
    """Canaries lost, from the probe's counters at the end of the live run."""
    scenario = result.scenario
    canaries = result.canaries
    if canaries is None:
        counted = "not read"
    else:
        counted = (
            f"{canaries.get('lost', 0.0):g} lost of "
            f"{sum(canaries.values()):g} ({canaries.get('produce_failed', 0.0):g} "
            "produce_failed)"
        )
    return (
        f"| {scenario.name} | canaries lost | {counted} | - | {scenario.expect.max_lost} "
        f"| {'pass' if result.ok else 'FAIL'} |"
    )


def _quiet_row(result: GamedayResult) -> str:
    """False pages and resolution: what must stay quiet, per scenario."""
    scenario = result.scenario
    live = len(result.live.false_pages)
    computed = "-" if result.computed is None else str(len(result.computed.false_pages))
    judged = result.computed or result.live
    resolution = judged.resolution
    if resolution is None:
        resolved = "-"
    elif resolution.ok is None:
        resolved = "unknown"
    else:
        last = "" if resolution.after is None else f", last {resolution.after:.0f}s after"
        resolved = ("yes" if resolution.ok else "NO") + last
    bound = scenario.expect.resolve_within
    muted = "" if not judged.muted else f"; {len(judged.muted)} muted"
    return (
        f"| {scenario.name} | false pages; all resolved | {live} | {computed}; {resolved}{muted} "
        f"| {_seconds(bound) if bound else '-'} | {'pass' if result.ok else 'FAIL'} |"
    )


def _cell(result: AlertResult | None) -> str:
    if result is None:
        return "-"
    if not result.fired:
        return "not fired"
    times = f"{_seconds(result.to_pending)} / {_seconds(result.to_firing)}"
    if result.to_notified == result.to_firing:
        return times
    if result.to_notified is None:
        return f"{times}, muted (never notified)"
    return f"{times}, muted until {_seconds(result.to_notified)}"


MARKDOWN_HEADER = [
    "| scenario | alert | live: pending / firing (s, live) "
    "| computed: pending / firing (s, production) | bound (s, production) | result |",
    "|---|---|---|---|---|---|",
]


TABLE_START = "<!-- detection-table: generated by `make detection-table`, do not edit -->"
TABLE_END = "<!-- end of detection-table -->"


def splice_table(document: str, rows: list[str], *, theirs_only: bool = False) -> str:
    """The document with the block between the table markers replaced by this table.

    With ``theirs_only`` (a run of some scenarios, not ``--all``), only the rows of the
    scenarios these rows are of are replaced, where their old rows stood (a new
    scenario's at the end), and every other scenario's rows are kept as they were
    measured: one game day re-run updates its own rows without wiping the rest.
    """
    start = document.index(TABLE_START) + len(TABLE_START)
    end = document.index(TABLE_END)
    if theirs_only:
        kept = document[start:end].strip().splitlines()[len(MARKDOWN_HEADER) :]
        rows = _merged(kept, rows)
    table_text = "\n".join(MARKDOWN_HEADER + rows)
    return document[:start] + "\n" + table_text + "\n" + document[end:]


def _scenario_of(row: str) -> str:
    return row.split("|")[1].strip()


def _merged(old: list[str], new: list[str]) -> list[str]:
    # Every scenario run has rows (at least its false-pages row): the new rows say
    # which scenarios ran.
    fresh: dict[str, list[str]] = {}
    for row in new:
        fresh.setdefault(_scenario_of(row), []).append(row)
    ran = set(fresh)
    merged: list[str] = []
    for row in old:
        scenario = _scenario_of(row)
        if scenario not in ran:
            merged.append(row)
        elif scenario in fresh:
            merged.extend(fresh.pop(scenario))
    return merged + [row for rows in fresh.values() for row in rows]

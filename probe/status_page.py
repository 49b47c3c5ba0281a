"""The status page at ``/``: what the on-call reads on the probe itself, as HTML.

Pure: :func:`render` turns an immutable :class:`StatusSnapshot` into a page, with no
clock read, no I/O and no JavaScript. The shell (probe.status_board) takes the
snapshot; the endpoints (probe.endpoints) serve it behind the same TLS and basic auth
as ``/metrics``.

Decisions, as an SRE reading it during an incident needs them:

- **Readable without JavaScript, refreshing itself**: ``<meta http-equiv="refresh">``
  every ``refresh_s`` seconds; a text browser, ``curl`` and a screenshot see it all.
- **Bounded, whatever the partition count**: per stage the last rounds' verdicts, one
  row per SLO window, the ``WORST_PARTITIONS`` stalest partitions (never all of
  them), and the last failures. At 10,000 partitions the page is tens of kilobytes
  (benchmarks/bench_status_page.py); the partition table is the metrics' business.
- **Everything escaped**: every string that came from outside (targets, reasons,
  Spark's error texts, trace ids) goes through :func:`html.escape`, attributes too.
- **Stable hooks for tests and scrapers**: ids (``readiness``, ``failures``,
  ``sink-progress``, ``reconcile-runs``), classes (``stage``, ``round``, ``window``,
  ``partition``, ``failure``) and ``data-*`` attributes carrying the raw values
  (``data-verdict``, ``data-window``, ``data-partition``, ``data-outcome``). Their
  layout may change; those names do not.
- Times are UTC (RFC 3339 to the second), ages in seconds relative to the snapshot.

>>> page = render(StatusSnapshot(service="run", target="orders", now_ns=0, ready=False,
...                              readiness="broker <unreachable>", refresh_s=10))
>>> 'broker &lt;unreachable&gt;' in page, '<script' in page
(True, False)
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

__all__ = [
    "WORST_PARTITIONS",
    "FailureRow",
    "PartitionStaleness",
    "ReconcileRun",
    "RoundVerdicts",
    "SinkBatchProgress",
    "SloTable",
    "SloWindow",
    "StageStatus",
    "StatusSnapshot",
    "render",
]

# Partitions listed per stage, stalest first. A page stays readable and small at
# 10,000 partitions; the rest are in synthetic_sla_partition_staleness_seconds.
WORST_PARTITIONS = 20


@dataclass(frozen=True, slots=True)
class RoundVerdicts:
    """The fates a stage decided during one round (one tick of the interval).

    A canary's fate is decided after its round: ``delivered`` and ``late`` when it
    arrives, ``lost`` a loss timeout later. So a row counts the verdicts *reached*
    in that round, which is what changed while the on-call watched.
    """

    started_ns: int
    delivered: int = 0
    late: int = 0
    lost: int = 0
    produce_failed: int = 0
    anomalies: int = 0
    invalid: int = 0
    in_progress: bool = False

    @property
    def verdict(self) -> str:
        """``failing`` with any fate but delivered (or invalid records), ``ok`` with
        deliveries only, ``idle`` with nothing decided."""
        if self.late or self.lost or self.produce_failed or self.invalid:
            return "failing"
        return "ok" if self.delivered else "idle"


@dataclass(frozen=True, slots=True)
class SloWindow:
    """One SLO window as the probe counted it: ``good`` of ``total`` events in the
    last ``window_s`` seconds, of which the probe has counted ``counted_s`` (less
    than the window while the process is younger than it).

    >>> w = SloWindow("1h", 3600, 3600, good=998, total=1000, objective=0.999)
    >>> round(w.burn_rate, 6), round(w.budget_left, 6)
    (2.0, -1.0)
    """

    window: str
    window_s: int
    counted_s: int
    good: int
    total: int
    objective: float

    @property
    def burn_rate(self) -> float | None:
        """The error ratio over the budget ratio (1: the budget lasts exactly its
        period); None with no event counted."""
        if self.total == 0:
            return None
        return ((self.total - self.good) / self.total) / (1.0 - self.objective)

    @property
    def budget_left(self) -> float | None:
        """Share of the window's error budget not spent: 1 - burn rate (negative
        once overspent); None with no event counted."""
        burn = self.burn_rate
        return None if burn is None else 1.0 - burn


@dataclass(frozen=True, slots=True)
class SloTable:
    """One SLI of a stage over every window: ``availability`` or ``latency``."""

    sli: str
    objective: float
    description: str
    windows: tuple[SloWindow, ...]


@dataclass(frozen=True, slots=True)
class PartitionStaleness:
    partition: int
    staleness_s: float
    stale: bool
    leader: int | None = None


@dataclass(frozen=True, slots=True)
class StageStatus:
    """One target's stage: its rounds, SLOs and stalest partitions."""

    target: str
    stage: str
    rounds: tuple[RoundVerdicts, ...] = ()
    slos: tuple[SloTable, ...] = ()
    worst: tuple[PartitionStaleness, ...] = ()
    partitions: int = 0
    stale_partitions: int = 0


@dataclass(frozen=True, slots=True)
class FailureRow:
    """A canary that was not delivered, an anomaly, or an invalid record."""

    at_ns: int
    target: str
    stage: str
    outcome: str
    reason: str
    partition: int | None = None
    seq: int | None = None
    broker: int | None = None
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class SinkBatchProgress:
    """The Spark sink query's progress, as its metrics last saw it."""

    running: bool
    batches: int
    last_batch_age_s: float | None
    watermark_skew_s: float
    lag_records: int | None
    restarts: int
    given_up: bool = False


@dataclass(frozen=True, slots=True)
class ReconcileRun:
    """One run of ``reconcile --every``: its verdict, or ``failed`` and why."""

    run_id: str
    finished_ns: int
    verdict: str
    summary: str


@dataclass(frozen=True, slots=True)
class StatusSnapshot:
    """Everything the page shows, taken at ``now_ns``."""

    service: str
    target: str
    now_ns: int
    ready: bool
    readiness: str
    refresh_s: int
    started_ns: int | None = None
    interval_s: float | None = None
    version: str = ""
    stages: tuple[StageStatus, ...] = ()
    failures: tuple[FailureRow, ...] = ()
    sink: SinkBatchProgress | None = None
    reconcile_runs: tuple[ReconcileRun, ...] | None = None
    links: tuple[str, ...] = field(default=("/metrics", "/readyz", "/healthz"))


# What a cell shows for a value not known, and the burn rate's unit: entities, so the
# source stays ASCII and no escaping touches them.
_NONE = "&ndash;"
_TIMES = "&times;"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _time(ns: int) -> str:
    """A moment as RFC 3339 UTC, to the second.

    >>> _time(1_700_000_000_999_000_000)
    '2023-11-14T22:13:20Z'
    """
    return datetime.fromtimestamp(ns // 1_000_000_000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(value: float) -> str:
    """A duration as people read it.

    >>> _seconds(0.0421), _seconds(12.34), _seconds(600), _seconds(4000)
    ('0.0421 s', '12.3 s', '10m 0s', '1h 6m 40s')
    """
    if value >= 3600:
        s = int(value)
        return f"{s // 3600}h {s % 3600 // 60}m {s % 60}s"
    if value >= 60:
        s = int(value)
        return f"{s // 60}m {s % 60}s"
    if value >= 10:
        return f"{value:.1f} s"
    return f"{value:.3g} s"


def _percent(value: float) -> str:
    """A share; past ±100 % (a budget overspent many times) without decimals.

    >>> _percent(0.99912), _percent(-306.6923)
    ('99.91 %', '-30669 %')
    """
    return f"{value * 100:.2f} %" if abs(value) < 1 else f"{value * 100:.0f} %"


_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1em 2em;color:#222}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.15em;margin:1.2em 0 .3em}
h3{font-size:1em;margin:.8em 0 .2em}
table{border-collapse:collapse;margin:.2em 0 .8em}
th,td{border:1px solid #ccc;padding:2px 8px;text-align:right}
th{background:#f3f3f3}td.text{text-align:left}
.ready{color:#176117}.not-ready{color:#a11}
tr[data-verdict=failing] td,td.bad,.exhausted{background:#fde2e2}
tr[data-verdict=ok] td.verdict{background:#e3f6e3}
tr[data-stale=true] td{background:#fff1d6}
code{font-size:.95em}
"""


def render(snapshot: StatusSnapshot) -> str:
    """The whole page for ``snapshot``."""
    s = snapshot
    state = "ready" if s.ready else "not-ready"
    title = f"sla-probe {s.service}: {s.target}"
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="refresh" content="{int(s.refresh_s)}">',
        '<meta name="viewport" content="width=device-width,initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head>",
        f'<body data-service="{_e(s.service)}" data-ready="{str(s.ready).lower()}">',
        f"<h1>{_e(title)}</h1>",
        f'<p id="readiness" class="{state}" data-ready="{str(s.ready).lower()}">'
        f"<strong>{'Ready' if s.ready else 'Not ready'}</strong>: "
        f'<span class="reason">{_e(s.readiness)}</span></p>',
        _about(s),
    ]
    if s.stages:
        parts.append('<section id="stages"><h2>Stages</h2>')
        parts.extend(_stage(i, stage, s.now_ns) for i, stage in enumerate(s.stages))
        parts.append("</section>")
    if s.sink is not None:
        parts.append(_sink(s.sink))
    if s.reconcile_runs is not None:
        parts.append(_reconcile(s.reconcile_runs))
    if s.stages or s.failures:
        parts.append(_failures(s.failures, s.now_ns))
    links = " · ".join(f'<a href="{_e(link)}">{_e(link)}</a>' for link in s.links)
    parts.append(
        f"<footer><p>Taken {_time(s.now_ns)}; refreshes every {int(s.refresh_s)} s. "
        f"{links}</p></footer></body></html>\n"
    )
    return "".join(parts)


def _about(s: StatusSnapshot) -> str:
    facts = [f'<span id="taken" data-ns="{s.now_ns}">{_time(s.now_ns)}</span>']
    if s.started_ns is not None:
        facts.append(f"up {_seconds(max(0, s.now_ns - s.started_ns) / 1e9)}")
    if s.interval_s is not None:
        facts.append(f"a round every {s.interval_s:g} s")
    if s.version:
        facts.append(f"version {_e(s.version)}")
    return f'<p id="about">{", ".join(facts)}</p>'


def _stage(index: int, stage: StageStatus, now_ns: int) -> str:
    parts = [
        f'<section class="stage" id="stage-{index}" data-target="{_e(stage.target)}" '
        f'data-stage="{_e(stage.stage)}">',
        f"<h3>{_e(stage.target)} · stage <code>{_e(stage.stage)}</code></h3>",
    ]
    if stage.rounds:
        parts.append(
            '<table class="rounds"><caption>Verdicts reached in the last rounds, newest '
            "first</caption><tr><th>round</th><th>verdict</th><th>delivered</th><th>late</th>"
            "<th>lost</th><th>produce failed</th><th>anomalies</th><th>invalid</th></tr>"
        )
        for r in reversed(stage.rounds):
            verdict = r.verdict + (" (in progress)" if r.in_progress else "")
            parts.append(
                f'<tr class="round" data-verdict="{r.verdict}" data-started-ns="{r.started_ns}">'
                f'<td class="text">{_time(r.started_ns)}</td>'
                f'<td class="verdict text">{verdict}</td>'
                f'<td class="delivered">{r.delivered}</td>'
                f'<td class="late{" bad" if r.late else ""}">{r.late}</td>'
                f'<td class="lost{" bad" if r.lost else ""}">{r.lost}</td>'
                f'<td class="produce_failed{" bad" if r.produce_failed else ""}">'
                f"{r.produce_failed}</td>"
                f'<td class="anomalies">{r.anomalies}</td>'
                f'<td class="invalid{" bad" if r.invalid else ""}">{r.invalid}</td></tr>'
            )
        parts.append("</table>")
    parts.extend(_slo(table) for table in stage.slos)
    parts.append(_worst(stage))
    parts.append("</section>")
    return "".join(parts)


def _slo(table: SloTable) -> str:
    parts = [
        f'<table class="slo" data-sli="{_e(table.sli)}"><caption>{_e(table.sli)}: '
        f"{_e(table.description)}, objective {_percent(table.objective)}</caption>"
        "<tr><th>window</th><th>counted</th><th>good / total</th><th>SLI</th>"
        "<th>burn rate</th><th>budget left</th></tr>"
    ]
    for w in table.windows:
        burn, left = w.burn_rate, w.budget_left
        sli = _NONE if w.total == 0 else _percent(w.good / w.total)
        counted = "all" if w.counted_s >= w.window_s else _seconds(w.counted_s)
        left_class = "budget-left" + (" exhausted" if left is not None and left <= 0 else "")
        parts.append(
            f'<tr class="window" data-window="{_e(w.window)}" '
            f'data-burn-rate="{"" if burn is None else f"{burn:.6g}"}">'
            f'<td class="text">{_e(w.window)}</td><td>{counted}</td>'
            f"<td>{w.good} / {w.total}</td><td>{sli}</td>"
            f'<td class="burn-rate">{_NONE if burn is None else f"{burn:.2f}{_TIMES}"}</td>'
            f'<td class="{left_class}">{_NONE if left is None else _percent(left)}</td></tr>'
        )
    parts.append("</table>")
    return "".join(parts)


def _or_none(number: int | None) -> str:
    return _NONE if number is None else str(number)


def _worst(stage: StageStatus) -> str:
    if not stage.worst:
        return f'<p class="partitions">{stage.partitions} partitions tracked.</p>'
    parts = [
        f'<table class="worst-partitions"><caption>The {len(stage.worst)} stalest of '
        f"{stage.partitions} partitions ({stage.stale_partitions} stale)</caption>"
        "<tr><th>partition</th><th>staleness</th><th>stale</th><th>leader broker</th></tr>"
    ]
    for p in stage.worst:
        stale = str(p.stale).lower()
        leader = _or_none(p.leader)
        parts.append(
            f'<tr class="partition" data-partition="{p.partition}" data-stale="{stale}">'
            f"<td>{p.partition}</td><td>{_seconds(p.staleness_s)}</td>"
            f'<td class="text">{"yes" if p.stale else "no"}</td>'
            f'<td class="broker">{leader}</td></tr>'
        )
    parts.append("</table>")
    return "".join(parts)


def _failures(failures: Sequence[FailureRow], now_ns: int) -> str:
    if not failures:
        return '<section id="failures"><h2>Last failures</h2><p>None.</p></section>'
    parts = [
        '<section id="failures"><h2>Last failures</h2><table class="failures">'
        "<caption>Newest first</caption><tr><th>when</th><th>target</th><th>stage</th>"
        "<th>outcome</th><th>reason</th><th>partition</th><th>seq</th><th>broker</th>"
        "<th>trace id</th></tr>"
    ]
    for f in reversed(failures):
        partition = _or_none(f.partition)
        seq = _or_none(f.seq)
        broker = _or_none(f.broker)
        trace = _NONE if f.trace_id is None else _e(f.trace_id)
        raw_partition = "" if f.partition is None else str(f.partition)
        parts.append(
            f'<tr class="failure" data-outcome="{_e(f.outcome)}" '
            f'data-partition="{raw_partition}">'
            f'<td class="text" title="{_time(f.at_ns)}">'
            f"{_seconds(max(0, now_ns - f.at_ns) / 1e9)} ago</td>"
            f'<td class="target text">{_e(f.target)}</td>'
            f'<td class="stage text">{_e(f.stage)}</td>'
            f'<td class="outcome text">{_e(f.outcome)}</td>'
            f'<td class="reason text">{_e(f.reason)}</td>'
            f'<td class="partition">{partition}</td><td class="seq">{seq}</td>'
            f'<td class="broker">{broker}</td>'
            f'<td class="trace-id text"><code>{trace}</code></td></tr>'
        )
    parts.append("</table></section>")
    return "".join(parts)


def _sink(sink: SinkBatchProgress) -> str:
    state = "given up" if sink.given_up else ("running" if sink.running else "not running")
    last = "none yet" if sink.last_batch_age_s is None else f"{_seconds(sink.last_batch_age_s)} ago"
    lag = "unknown" if sink.lag_records is None else str(sink.lag_records)
    return (
        '<section id="sink-progress"><h2>Sink batch progress</h2><table class="sink">'
        f'<tr><th>query</th><td class="query-state text" data-running='
        f'"{str(sink.running).lower()}">{state}</td></tr>'
        f'<tr><th>batches committed</th><td class="batches">{sink.batches}</td></tr>'
        f'<tr><th>last batch</th><td class="last-batch text">{last}</td></tr>'
        f'<tr><th>watermark skew</th><td class="watermark-skew">'
        f"{_seconds(sink.watermark_skew_s)}</td></tr>"
        f'<tr><th>records not judged yet</th><td class="lag">{lag}</td></tr>'
        f'<tr><th>restarts</th><td class="restarts">{sink.restarts}</td></tr>'
        "</table></section>"
    )


def _reconcile(runs: Sequence[ReconcileRun]) -> str:
    if not runs:
        return (
            '<section id="reconcile-runs"><h2>Reconciliation runs</h2>'
            "<p>No run finished yet.</p></section>"
        )
    parts = [
        '<section id="reconcile-runs"><h2>Reconciliation runs</h2><table class="runs">'
        "<caption>Newest first</caption><tr><th>finished</th><th>run</th><th>verdict</th>"
        "<th>summary</th></tr>"
    ]
    for run in reversed(runs):
        bad = " bad" if run.verdict in ("mismatch", "failed") else ""
        parts.append(
            f'<tr class="run" data-verdict="{_e(run.verdict)}">'
            f'<td class="text">{_time(run.finished_ns)}</td>'
            f'<td class="text"><code>{_e(run.run_id) if run.run_id else _NONE}</code></td>'
            f'<td class="verdict text{bad}">{_e(run.verdict)}</td>'
            f'<td class="summary text">{_e(run.summary)}</td></tr>'
        )
    parts.append("</table></section>")
    return "".join(parts)

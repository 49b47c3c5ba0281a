"""A reconciliation as a terminal table or as JSON. Pure.

The table has one line per window and partition that held something (its counts and
result; empty windows are counted in the verdict, not listed as evidence), then one
line per window with discrepancies naming its partition, window and sample offsets
(what an operator reads or replays), what waits in windows still open, then the
verdict::

    partition 0, window 12:00:00-12:05:00 (offsets 40-54): 1 missing: offsets 47
    result: MISMATCH (1 of 36 windows): 1 missing, 0 extra, 0 duplicated, ...

Right after records were written, with windows of 5 minutes, nothing has settled::

    pending: 9 records in windows still open, on 3 partitions: compared from
      2026-01-01T12:10:30Z (in 4m45s)
    result: NOTHING COMPARED (36 windows: 36 empty): 0 records judged, 9 pending until
      2026-01-01T12:10:30Z: not a pass; reconcile again then
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from probe.reconcile.outcome import (
    DISCREPANCIES,
    Reconciliation,
    RecordResult,
    Verdict,
    WindowResult,
    WindowStatus,
)

_HEADER = (
    f"{'partition':>9}  {'window':<17}  {'offsets':<19}  {'source':>8}  {'sink':>8}  "
    f"{'missing':>7}  {'extra':>5}  {'dup':>5}  {'checksum':>8}  result"
)
_RESULT = {
    WindowStatus.COMPLETE: "OK",
    WindowStatus.MISMATCH: "MISMATCH",
    WindowStatus.EMPTY: "EMPTY",
    WindowStatus.UNVERIFIABLE: "UNVERIFIABLE",
}


def _offsets(result: WindowResult) -> str:
    window = result.window
    return f"{window.start}-{window.end - 1}" if window.end > window.start else "-"


def _time(result: WindowResult) -> str:
    return result.window.label if result.window.start_ms is not None else "-"


def _partition(result: WindowResult) -> str:
    # No partition: the table's rows placed by their time (extra rows of a table
    # matched by key).
    partition = result.window.partition
    return "-" if partition is None else str(partition)


def _line(result: WindowResult) -> str:
    t = result.tally
    return (
        f"{_partition(result):>9}  {_time(result):<17}  {_offsets(result):<19}  "
        f"{t.source:>8}  {t.sink:>8}  {t.missing:>7}  {t.extra:>5}  {t.duplicated:>5}  "
        f"{t.mismatched:>8}  {_RESULT[result.status]}"
    )


def _details(result: WindowResult) -> str | None:
    t, window = result.tally, result.window
    if window.partition is None:
        where = f"table rows by time {window.label}"
    elif window.start_ms is not None:
        where = f"partition {window.partition}, window {window.label} (offsets {_offsets(result)})"
    else:
        where = f"partition {window.partition}, window offsets {_offsets(result)}"
    if result.status is WindowStatus.UNVERIFIABLE:
        return f"{where}: unverifiable: some of its records left the topic before this run"
    # Extra rows are named by key when the table is matched by key, else by offset.
    extra: tuple[str, tuple[object, ...]] = (
        ("keys", t.samples.extra_keys) if t.samples.extra_keys else ("offsets", t.samples.extra)
    )
    kinds: list[tuple[str, int, str, tuple[object, ...]]] = [
        ("missing", t.missing, "offsets", t.samples.missing),
        ("checksum mismatches", t.mismatched, "offsets", t.samples.mismatched),
        ("extra", t.extra, *extra),
        ("duplicated", t.duplicated, "offsets", t.samples.duplicated),
    ]
    found = [
        f"{count} {name}: {what} {', '.join(map(str, sample))}"
        + (", ..." if count > len(sample) else "")
        for name, count, what, sample in kinds
        if count
    ]
    return f"{where}: {'; '.join(found)}" if found else None


def render_table(run: Reconciliation) -> str:
    lines = [f"reconcile {run.topic} -> {run.table} (run {run.run_id})"]
    listed = [result for result in run.windows if result.status is not WindowStatus.EMPTY]
    if listed:
        lines += [_HEADER, *(_line(result) for result in listed)]
    lines += [detail for result in listed if (detail := _details(result)) is not None]
    if run.pending_records:
        lines.append(_pending(run))
    lines.append(_verdict(run))
    return "\n".join(lines) + "\n"


def _pending(run: Reconciliation) -> str:
    partitions = len({p.partition for p in run.pending if p.records})
    return (
        f"pending: {run.pending_records} records in windows still open, on {partitions} "
        f"partition{'s' if partitions != 1 else ''}: compared from {_when(run)}"
    )


def _when(run: Reconciliation) -> str:
    """``2026-01-01T12:10:30Z (in 4m45s)``: when the pending records are compared."""
    at = run.verdict_at_ms
    assert at is not None
    return f"{iso_time(at)} (in {_span(at - run.started_ms)})"


def _span(ms: int) -> str:
    """``4m45s``, ``45s``, ``1h2m``.

    >>> _span(285_000), _span(45_400), _span(3_720_000)
    ('4m45s', '46s', '1h2m')
    """
    seconds = max(0, -(-ms // 1000))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m"
    return f"{minutes}m{seconds}s" if minutes else f"{seconds}s"


def _verdict(run: Reconciliation) -> str:
    statuses = run.windows_by_status()
    records = run.records()
    judged = run.judged()
    others = [
        f"{statuses[status]} {status.value}"
        for status in (WindowStatus.EMPTY, WindowStatus.UNVERIFIABLE)
        if statuses[status]
    ]
    verdict = run.verdict
    if verdict is Verdict.NOTHING_COMPARED:
        seen = f"{len(run.windows)} windows: {'; '.join(others)}" if others else "no window"
        if run.verdict_at_ms is not None:
            why = (
                f"{run.pending_records} pending until {iso_time(run.verdict_at_ms)}: not a pass; "
                "reconcile again then"
            )
        elif statuses[WindowStatus.UNVERIFIABLE]:
            why = (
                "none pending: the windows holding records lost some of them to the topic's "
                "retention before this run"
            )
        else:
            why = "none pending: the topic holds no record to compare in the lookback"
        return f"result: NOTHING COMPARED ({seen}): 0 records judged, {why}"
    counts = (
        f"{records[RecordResult.MISSING]} missing, {records[RecordResult.EXTRA]} extra, "
        f"{records[RecordResult.DUPLICATED]} duplicated, "
        f"{records[RecordResult.CHECKSUM_MISMATCH]} checksum mismatches in {judged} records"
    )
    aside = "".join(f"; {other}" for other in others)
    if verdict is Verdict.COMPLETE:
        return f"result: OK ({statuses[WindowStatus.COMPLETE]} windows complete{aside}): {counts}"
    return (
        f"result: MISMATCH ({statuses[WindowStatus.MISMATCH]} of {len(run.windows)} windows"
        f"{aside}): {counts}"
    )


def iso_time(ms: int | None) -> str | None:
    """``2026-01-01T12:10:30Z`` (UTC), as the JSON report writes times."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


def window_dict(result: WindowResult) -> dict[str, Any]:
    t, w = result.tally, result.window
    return {
        "partition": w.partition,
        "start_offset": w.start,
        "end_offset": w.end,
        "start": iso_time(w.start_ms),
        "end": iso_time(w.end_ms),
        "status": result.status.value,
        **t.counts(),
        "samples": {
            "missing": list(t.samples.missing),
            "checksum_mismatch": list(t.samples.mismatched),
            "extra": list(t.samples.extra),
            "extra_keys": list(t.samples.extra_keys),
            "duplicated": list(t.samples.duplicated),
        },
    }


def as_json(run: Reconciliation) -> dict[str, Any]:
    """The run as ``--json`` prints it: ``ok`` and the verdict, totals, what is pending,
    then every window. ``ok`` is true only for ``verdict`` complete."""
    at = run.verdict_at_ms
    return {
        "ok": run.ok,
        "verdict": run.verdict.value,
        "run_id": run.run_id,
        "topic": run.topic,
        "table": run.table,
        "started": iso_time(run.started_ms),
        "duration_s": round(run.duration_s, 3),
        "mismatch_ratio": run.mismatch_ratio,
        "records": {kind.value: count for kind, count in run.records().items()},
        "discrepancies": sum(run.records()[kind] for kind in DISCREPANCIES),
        "judged": run.judged(),
        "pending": {
            "records": run.pending_records,
            "partitions": len({p.partition for p in run.pending if p.records}),
            "verdict_at": iso_time(at),
            "verdict_in_s": None if at is None else max(0.0, (at - run.started_ms) / 1000),
        },
        "windows_by_status": {s.value: n for s, n in run.windows_by_status().items()},
        "windows": [window_dict(result) for result in run.windows],
    }

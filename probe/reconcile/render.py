"""A reconciliation as a terminal table or as JSON. Pure.

The table has one line per window and partition (its counts and result), then one
line per window with discrepancies naming its partition, window and sample offsets
(what an operator reads or replays), then the verdict::

    partition 0, window 12:00:00-12:05:00 (offsets 40-54): 1 missing: offsets 47
    result: MISMATCH (1 of 36 windows): 1 missing, 0 extra, 0 duplicated, ...
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from probe.reconcile.outcome import (
    DISCREPANCIES,
    Reconciliation,
    RecordResult,
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
    lines = [f"reconcile {run.topic} -> {run.table} (run {run.run_id})", _HEADER]
    lines += [_line(result) for result in run.windows]
    lines += [detail for result in run.windows if (detail := _details(result)) is not None]
    lines.append(_verdict(run))
    return "\n".join(lines) + "\n"


def _verdict(run: Reconciliation) -> str:
    if not run.windows:
        return "result: OK: no window has settled yet, nothing to compare"
    statuses = run.windows_by_status()
    records = run.records()
    judged = sum(records[kind] for kind in RecordResult if kind is not RecordResult.UNVERIFIABLE)
    counts = (
        f"{records[RecordResult.MISSING]} missing, {records[RecordResult.EXTRA]} extra, "
        f"{records[RecordResult.DUPLICATED]} duplicated, "
        f"{records[RecordResult.CHECKSUM_MISMATCH]} checksum mismatches in {judged} records"
    )
    unverifiable = statuses[WindowStatus.UNVERIFIABLE]
    aside = f"; {unverifiable} unverifiable" if unverifiable else ""
    if run.ok:
        return f"result: OK ({statuses[WindowStatus.COMPLETE]} windows complete{aside}): {counts}"
    return (
        f"result: MISMATCH ({statuses[WindowStatus.MISMATCH]} of {len(run.windows)} windows"
        f"{aside}): {counts}"
    )


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


def window_dict(result: WindowResult) -> dict[str, Any]:
    t, w = result.tally, result.window
    return {
        "partition": w.partition,
        "start_offset": w.start,
        "end_offset": w.end,
        "start": _iso(w.start_ms),
        "end": _iso(w.end_ms),
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
    """The run as ``--json`` prints it: ``ok``, totals, then every window."""
    return {
        "ok": run.ok,
        "run_id": run.run_id,
        "topic": run.topic,
        "table": run.table,
        "started": _iso(run.started_ms),
        "duration_s": round(run.duration_s, 3),
        "mismatch_ratio": run.mismatch_ratio,
        "records": {kind.value: count for kind, count in run.records().items()},
        "discrepancies": sum(run.records()[kind] for kind in DISCREPANCIES),
        "windows_by_status": {s.value: n for s, n in run.windows_by_status().items()},
        "windows": [window_dict(result) for result in run.windows],
    }

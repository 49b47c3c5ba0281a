"""The reconciliation report table: one row per window and partition, per run.

``status`` is the window's: complete, mismatch, empty (nothing in it to compare:
no evidence either way), unverifiable; or ``pending`` for the records of a window
still open, which this run did not compare (``source`` their count by offsets, the
table not read: a later run compares them).

Each run writes ``<report_path>/run_id=<id>/part-00000.parquet``, replacing it: a run
retried under the same id (a CronJob's scheduled time, say) replaces its rows instead
of adding to them, and the table is the union of every run's. As in the sink's
tables, the run id is in the directory name (a Hive-style partition), not a column:
Spark and Arrow datasets read it back as a column ``run_id``.

Written by the driver through Arrow's file systems (local, ``hdfs://``, ``s3a://``,
``gs://``): a few rows per window need no Spark job.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq

from probe.reconcile.outcome import Reconciliation, Tally
from probe.spark.tables import filesystem_of

# Run ids become directory names: nothing that would need escaping there.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")

_SAMPLE = pa.list_(pa.int64())
REPORT_SCHEMA = pa.schema(
    [
        ("reconciled_at", pa.timestamp("ms", tz="UTC")),
        ("topic", pa.string()),
        ("table", pa.string()),
        ("partition", pa.int32()),
        ("start_offset", pa.int64()),
        ("end_offset", pa.int64()),
        ("window_start", pa.timestamp("ms", tz="UTC")),
        ("window_end", pa.timestamp("ms", tz="UTC")),
        ("status", pa.string()),
        ("source", pa.int64()),
        ("sink", pa.int64()),
        ("matched", pa.int64()),
        ("missing", pa.int64()),
        ("extra", pa.int64()),
        ("duplicated", pa.int64()),
        ("checksum_mismatch", pa.int64()),
        ("excluded", pa.int64()),
        ("source_checksum", pa.string()),
        ("sink_checksum", pa.string()),
        ("missing_sample", _SAMPLE),
        ("checksum_mismatch_sample", _SAMPLE),
        ("extra_sample", _SAMPLE),
        ("duplicated_sample", _SAMPLE),
        # A table matched by key names its extra rows by key.
        ("extra_key_sample", pa.list_(pa.string())),
    ]
)


def _moment(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


PENDING = "pending"


def report_rows(run: Reconciliation) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for result in run.windows:
        w, t = result.window, result.tally
        rows.append(
            {
                "reconciled_at": _moment(run.started_ms),
                "topic": run.topic,
                "table": run.table,
                "partition": w.partition,
                "start_offset": w.start,
                "end_offset": w.end,
                "window_start": _moment(w.start_ms),
                "window_end": _moment(w.end_ms),
                "status": result.status.value,
                **t.counts(),
                "missing_sample": list(t.samples.missing),
                "checksum_mismatch_sample": list(t.samples.mismatched),
                "extra_sample": list(t.samples.extra),
                "duplicated_sample": list(t.samples.duplicated),
                "extra_key_sample": list(t.samples.extra_keys),
            }
        )
    unread = Tally()
    for pending in run.pending:
        rows.append(
            {
                "reconciled_at": _moment(run.started_ms),
                "topic": run.topic,
                "table": run.table,
                "partition": pending.partition,
                "start_offset": pending.start,
                "end_offset": pending.end,
                "window_start": _moment(pending.start_ms),
                "window_end": _moment(pending.end_ms),
                "status": PENDING,
                **unread.counts(),
                "source": pending.records,
                "missing_sample": [],
                "checksum_mismatch_sample": [],
                "extra_sample": [],
                "duplicated_sample": [],
                "extra_key_sample": [],
            }
        )
    return rows


def write_report(uri: str, run: Reconciliation) -> str:
    """The run's rows under ``uri``, replacing an earlier write of the same run id;
    returns the file written."""
    if not RUN_ID.fullmatch(run.run_id):
        raise ValueError(f"run id {run.run_id!r} cannot name a directory")
    table = pa.Table.from_pylist(report_rows(run), schema=REPORT_SCHEMA)
    filesystem, root = filesystem_of(uri.rstrip("/"))
    directory = f"{root}/run_id={run.run_id}"
    filesystem.create_dir(directory, recursive=True)
    path = f"{directory}/part-00000.parquet"
    pq.write_table(table, path, filesystem=filesystem)
    return path

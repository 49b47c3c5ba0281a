"""The sink's tables: one Parquet file per table and micro-batch.

Each batch writes its own ``batch_id=N`` directory, overwriting it, so a batch
replayed after a failure replaces its output instead of adding to it.
"""

from __future__ import annotations

import os
import posixpath
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

if TYPE_CHECKING:
    # Only named: the frames come from Spark (foreachBatch), and pyarrow converts
    # them; importing pandas would cost `sla-probe reconcile` a third of a second.
    import pandas as pd

# The sink tables. Columns are typed here, not inferred from a batch: a column that
# is null in one batch must not change type in the next.
TABLE_SCHEMAS = {
    "canaries": pa.schema(
        [
            ("probe_id", pa.string()),
            ("target", pa.string()),
            ("partition", pa.int32()),
            ("incarnation", pa.int64()),
            ("seq", pa.int64()),
            ("produced_ns", pa.int64()),
            ("judged_ns", pa.int64()),
            ("sink_commit_ns", pa.int64()),
            ("kafka_partition", pa.int32()),
            ("kafka_offset", pa.int64()),
            ("trace_context", pa.string()),
        ]
    ),
    "verdicts": pa.schema(
        [
            ("kind", pa.string()),
            ("probe_id", pa.string()),
            ("target", pa.string()),
            ("partition", pa.int32()),
            ("incarnation", pa.int64()),
            ("seq", pa.int64()),
            ("produced_ns", pa.int64()),
            ("outcome", pa.string()),
            ("judged_ns", pa.int64()),
            ("kafka_partition", pa.int32()),
            ("kafka_offset", pa.int64()),
        ]
    ),
    "quarantine": pa.schema(
        [
            ("claimed_probe_id", pa.string()),
            ("reason", pa.string()),
            ("kafka_partition", pa.int32()),
            ("kafka_offset", pa.int64()),
            ("value", pa.binary()),
            ("quarantined_ns", pa.int64()),
        ]
    ),
}


def write_batch(root: str, rows: pd.DataFrame, batch_id: int, commit_ns: int) -> None:
    """The judged rows of one batch into the tables under ``root``."""
    canaries = rows[rows["kind"] == "canary"].assign(sink_commit_ns=commit_ns)
    verdicts = rows[rows["kind"].isin(["fate", "anomaly"])]
    quarantine = (
        rows[rows["kind"] == "invalid"]
        .rename(columns={"outcome": "reason", "probe_id": "claimed_probe_id"})
        .assign(quarantined_ns=commit_ns)
    )
    for name, frame in (
        ("canaries", canaries),
        ("verdicts", verdicts),
        ("quarantine", quarantine),
    ):
        if not frame.empty:
            _write_table(f"{root.rstrip('/')}/{name}", TABLE_SCHEMAS[name], frame, batch_id)


def _write_table(uri: str, schema: pa.Schema, frame: pd.DataFrame, batch_id: int) -> None:
    """One Parquet file per table and batch, written by the driver through Arrow's
    file systems (local, HDFS, S3, GCS by URI): a handful of rows per batch does
    not need a Spark job, and the file name is fixed, so a replayed batch
    overwrites its own output instead of adding to it."""
    table = pa.Table.from_pandas(frame[schema.names], schema=schema, preserve_index=False)
    filesystem, root = filesystem_of(uri)
    directory = f"{root}/batch_id={batch_id}"
    filesystem.create_dir(directory, recursive=True)
    pq.write_table(table, f"{directory}/part-00000.parquet", filesystem=filesystem)


def filesystem_of(uri: str) -> tuple[pafs.FileSystem, str]:
    """Arrow's file system and path for a sink URI (a local path, ``file://``,
    ``hdfs://``, ``s3a://``, ``gs://``...)."""
    # Hadoop names S3 `s3a://` (the checkpoint goes through Hadoop); Arrow, `s3://`.
    if uri.startswith("s3a://"):
        uri = "s3://" + uri.removeprefix("s3a://")
    if "://" not in uri:
        uri = os.path.abspath(uri)
    filesystem, path = pafs.FileSystem.from_uri(uri)
    return filesystem, str(path)


def read_text(uri: str) -> str | None:
    """A small text file's content, None if there is none."""
    filesystem, path = filesystem_of(uri)
    if filesystem.get_file_info(path).type == pafs.FileType.NotFound:
        return None
    with filesystem.open_input_stream(path) as stream:
        return bytes(stream.read()).decode("utf-8")


def write_text(uri: str, text: str) -> None:
    """Write a small text file whole: a temporary file moved over it, so a reader
    sees the old content or the new, never a part."""
    filesystem, path = filesystem_of(uri)
    filesystem.create_dir(posixpath.dirname(path), recursive=True)
    temporary = f"{path}.tmp-{os.getpid()}"
    with filesystem.open_output_stream(temporary) as stream:
        stream.write(text.encode("utf-8"))
    filesystem.move(temporary, path)

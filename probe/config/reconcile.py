"""The ``reconcile`` section: `sla-probe reconcile`'s table, how a record becomes the row
it must match, and how each partition is cut into windows (probe/reconcile/).

Each format's rules (canary matches by partition and offset, json needs the fields to
compare, raw compares one column) are checked here; what reconcile needs from other
sections (the brokers, the sink's path, the signing key) is checked where the whole
model is assembled (probe.config.require_for_reconcile).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator

from probe.config.base import _names, _Section
from probe.config.durations import DAY, HOUR, MINUTE, Duration, _between


class ReconcileWindowConfig(_Section):
    """How each partition is cut for comparison: every ``duration`` of record time
    (default 5m), or every ``offsets`` offsets. One of them, not both."""

    duration: Annotated[Duration, _between(1.0, DAY)] | None = None
    offsets: int | None = Field(default=None, ge=1)

    @field_validator("offsets")
    @classmethod
    def _one_way(cls, offsets: int | None, info: ValidationInfo) -> int | None:
        if offsets is not None and info.data.get("duration") is not None:
            raise ValueError("give reconcile.window.duration or .offsets, not both")
        return offsets

    @property
    def duration_s(self) -> float | None:
        """The time window, when windows are by time (the default)."""
        if self.offsets is not None:
            return None
        return self.duration if self.duration is not None else 5 * MINUTE


def _column_names(value: object) -> object:
    names = _names(value)
    if isinstance(names, list) and not names:
        raise ValueError("must name at least one column")
    return tuple(names) if isinstance(names, list) else names


ColumnName = Annotated[str, Field(min_length=1)]


class ReconcileConfig(_Section):
    """`sla-probe reconcile`: a topic's records against a table's rows, by count and
    checksum per window and partition (see probe/reconcile/)."""

    # The Parquet table; default the sink stage's canaries/ under sink.path.
    table: str | None = Field(default=None, min_length=1)
    # How a record becomes the row it must match (probe/spark/checksum.py).
    format: Literal["canary", "raw", "json"] = "canary"
    partition_column: ColumnName = "kafka_partition"
    offset_column: ColumnName = "kafka_offset"
    # A table without partition and offset columns is matched by a key column: the
    # record's Kafka key (UTF-8), or with source_key that field of its JSON value.
    key_column: ColumnName | None = None
    source_key: ColumnName | None = None
    # The table's time column (timestamp, date or epoch ms), matched by key: places
    # rows whose key no record holds, so they count as extra; without it they are
    # not judged.
    time_column: ColumnName | None = None
    # The table's columns the checksum covers; default: the format's own (canary: the
    # signed fields; raw: value). Required for json.
    checksum_columns: Annotated[
        tuple[ColumnName, ...] | None,
        BeforeValidator(_column_names),
        Field(validate_default=True),
    ] = None
    window: ReconcileWindowConfig = ReconcileWindowConfig()
    # Records younger than this are on their way, not missing. Default: sink.freshness.
    settle: Annotated[Duration, _between(0.01, DAY)] | None = None
    # How far back each run looks; null: the whole retained log (windows by offsets).
    lookback: Annotated[Duration, _between(1.0, 90 * DAY)] | None = HOUR
    # Keep reconciling this often, serving /metrics and /readyz; null: once, then exit.
    every: Annotated[Duration, _between(1.0, DAY)] | None = None
    # The report table (one row per window and partition, per run); default
    # <sink.path>/reconciliation, none without a sink.path.
    report_path: str | None = Field(default=None, min_length=1)
    # Offsets of each discrepancy named per window.
    sample_size: int = Field(default=10, ge=0, le=1000)

    @field_validator("lookback")
    @classmethod
    def _lookback_for_time(cls, lookback: float | None, info: ValidationInfo) -> float | None:
        window = info.data.get("window")
        if lookback is None and isinstance(window, ReconcileWindowConfig) and window.duration_s:
            raise ValueError("required with windows by time (or set reconcile.window.offsets)")
        return lookback

    @field_validator("key_column")
    @classmethod
    def _key_for_format(cls, key: str | None, info: ValidationInfo) -> str | None:
        if key is not None and info.data.get("format") == "canary":
            raise ValueError("format canary matches by partition and offset")
        return key

    @field_validator("source_key", "time_column")
    @classmethod
    def _needs_key(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("key_column") is None:
            raise ValueError("needs key_column (it matches rows by key)")
        if info.field_name == "source_key" and value and info.data.get("format") != "json":
            raise ValueError("a field of a JSON value: format json only")
        return value

    @field_validator("checksum_columns")
    @classmethod
    def _columns_for_format(
        cls, columns: tuple[str, ...] | None, info: ValidationInfo
    ) -> tuple[str, ...] | None:
        record_format = info.data.get("format")
        if record_format == "json" and not columns:
            raise ValueError("required with format json: the fields to compare")
        if record_format == "raw" and columns is not None and len(columns) != 1:
            raise ValueError("format raw compares one column with the record's value")
        if record_format == "canary" and columns is not None:
            raise ValueError("format canary compares the canary's signed fields; leave it unset")
        return columns

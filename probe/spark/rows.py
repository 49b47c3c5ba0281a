"""The sink's rows: what the decoder emits, what the judge emits, and the findings
they stand for.

Records cross Spark's boundaries as rows: the decoder (on the executors) turns each
record into a :data:`DECODED` row, the stateful judge turns those into :data:`JUDGED`
rows, and the commit step turns judged rows back into findings with
:func:`finding_of`, the inverse of the row builders here. Classification is the
stages' own (:func:`probe.core.canary.classify`), so a record means the same thing here as
at every other stage.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from probe.core.canary import Canary
from probe.core.judge import (
    Anomaly,
    AnomalyKind,
    Fate,
    Finding,
    Outcome,
    StreamKey,
    arrival_outcome,
)
from probe.core.keys import KeyRing
from probe.spark.verify import verify

DECODED = StructType(
    [
        StructField("probe_id", StringType()),
        StructField("target", StringType()),
        StructField("partition", IntegerType()),
        StructField("incarnation", LongType()),
        StructField("seq", LongType()),
        StructField("produced_ns", LongType()),
        StructField("produced_at", TimestampType()),
        StructField("trace_context", StringType()),
        StructField("reason", StringType()),  # null for a valid canary
        StructField("kafka_partition", IntegerType()),
        StructField("kafka_offset", LongType()),
        StructField("value", BinaryType()),  # kept for rejected records only
    ]
)

# Verdicts of records that are not judged, beside the RejectReason values.
FOREIGN = AnomalyKind.FOREIGN.value
MISROUTED = AnomalyKind.MISROUTED.value

# The grouping key of rejected records (with their Kafka partition). Were a canary to
# claim it as its probe id, rows would still be told apart by their `reason`.
QUARANTINE_KEY = "\x00rejected"

# What the judge emits; `kind` says which columns mean something:
#   canary   a valid arrival (every one, duplicates included) for the canaries table
#   fate     outcome = delivered | late | lost | produce_failed
#   anomaly  outcome = duplicate | out_of_order | resurrected
#   invalid  outcome = the rejection reason; value = the raw record
JUDGED = StructType(
    [
        StructField("kind", StringType()),
        StructField("probe_id", StringType()),
        StructField("target", StringType()),
        StructField("partition", IntegerType()),
        StructField("incarnation", LongType()),
        StructField("seq", LongType()),
        StructField("produced_ns", LongType()),
        StructField("outcome", StringType()),
        StructField("judged_ns", LongType()),
        StructField("kafka_partition", IntegerType()),
        StructField("kafka_offset", LongType()),
        StructField("trace_context", StringType()),
        StructField("value", BinaryType()),
    ]
)


# pandas' nullable integers, for Spark's integer types (see typed_frame).
_NULLABLE_INTEGERS = {"integer": "Int32", "long": "Int64"}


def typed_frame(rows: Sequence[Mapping[str, object]], schema: StructType) -> pd.DataFrame:
    """Rows as a frame for ``schema`` whose integer columns are pandas' nullable
    integers.

    pandas makes a column of integers and nulls float64, which cannot hold a
    nanosecond time or an incarnation exactly (both are above 2**53): a batch mixing
    canaries with rejected records or losses (whose fields are null) would carry
    ``produced_ns`` a few hundred nanoseconds off into the tables and the judge.

    Every other column is object, said outright: pandas makes an empty list float64,
    which Arrow converts to a string or binary column as a ChunkedArray, and Spark's
    conversion of a stateful operator's output then fails the batch (an empty frame
    from the judge, after an unclean election, crash-looped the sink query).
    """
    columns: dict[str, Any] = {}
    for field in schema.fields:
        values = [row[field.name] for row in rows]
        dtype = _NULLABLE_INTEGERS.get(field.dataType.typeName(), object)
        columns[field.name] = pd.array(values, dtype=dtype)
    return pd.DataFrame(columns, columns=schema.fieldNames())


def frame_rows(frame: pd.DataFrame) -> Iterator[Any]:
    """The frame's rows as named tuples, built a column at a time: pandas' own
    ``itertuples`` indexes every column anew at each call, which for the judge's many
    small groups cost more than judging them."""
    row_type = _row_type(tuple(str(name) for name in frame.columns))
    return map(row_type._make, zip(*(frame[name].tolist() for name in frame.columns), strict=True))


@functools.cache
def _row_type(names: tuple[str, ...]) -> Any:
    return collections.namedtuple("Row", names)


def decode_batches(
    keyring_json: str, max_size: int, probe_id: str
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The executor-side decoder for mapInArrow: Arrow batches of the source's
    ``partition``, ``offset`` and ``value`` in, :data:`DECODED` batches out. Never
    raises for hostile bytes.

    Records are classified exactly as the other stages classify them (foreign, invalid
    with a reason, or a verified canary), a batch at a time (probe.spark.verify);
    ``reason`` carries the verdict of a record that is not judged: a
    :class:`RejectReason`, ``foreign``, or ``misrouted`` for a verified canary read from
    another Kafka partition than the one it names.
    """

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        keyring = KeyRing.from_json(keyring_json)
        for batch in batches:
            yield decoded(batch, keyring, probe_id, max_size)

    return decode


# DECODED in Arrow's terms, as decoded() builds it.
DECODED_ARROW = pa.schema(
    [
        ("probe_id", pa.string()),
        ("target", pa.string()),
        ("partition", pa.int32()),
        ("incarnation", pa.int64()),
        ("seq", pa.int64()),
        ("produced_ns", pa.int64()),
        ("produced_at", pa.timestamp("us", tz="UTC")),
        ("trace_context", pa.string()),
        ("reason", pa.string()),
        ("kafka_partition", pa.int32()),
        ("kafka_offset", pa.int64()),
        ("value", pa.binary()),
    ]
)
# The most of a rejected record kept: a record too large to be a canary is not worth
# keeping whole.
KEPT_BYTES = 65536
# Spark timestamps are microseconds; pandas' range ends in 2262.
_MAX_EVENT_US = 9_000_000_000_000_000


def decoded(
    batch: pa.RecordBatch, keyring: KeyRing, probe_id: str, max_size: int
) -> pa.RecordBatch:
    """One batch of the source's records as :data:`DECODED` rows (see decode_batches)."""
    kafka_partition = batch.column("partition").cast(pa.int32())
    values = batch.column("value")
    verdicts = verify(values, keyring, probe_id, max_size=max_size)
    canary = pa.array(verdicts.canary)
    foreign = pa.array(verdicts.foreign)
    rejected = pc.invert(pc.or_(canary, foreign))
    # A verified canary naming another partition than the one it was read from was
    # forged or replayed there: not judged.
    misrouted = pc.fill_null(pc.not_equal(verdicts.partition, kafka_partition), False)
    reason = pc.if_else(
        canary,
        pc.if_else(misrouted, pa.scalar(MISROUTED), pa.scalar(None, pa.string())),
        pc.if_else(foreign, pa.scalar(FOREIGN), verdicts.reason),
    )
    produced_us = pc.min_element_wise(
        pc.divide(verdicts.produced_ns, 1000), pa.scalar(_MAX_EVENT_US, pa.int64())
    )
    payload = pc.binary_slice(pc.fill_null(values.cast(pa.binary()), b""), 0, KEPT_BYTES)
    return pa.RecordBatch.from_arrays(
        [
            # As claimed, unauthenticated, for a rejected record; none for a foreign one.
            pc.if_else(canary, verdicts.probe_id, verdicts.claimed_probe_id),
            verdicts.target,
            verdicts.partition,
            verdicts.incarnation,
            verdicts.seq,
            verdicts.produced_ns,
            produced_us.cast(pa.timestamp("us", tz="UTC")),
            verdicts.trace_context,
            reason,
            kafka_partition,
            batch.column("offset").cast(pa.int64()),
            pc.if_else(rejected, payload, pa.scalar(None, pa.binary())),
        ],
        schema=DECODED_ARROW,
    )


def rejected_out(row: Any) -> dict[str, object]:
    # A foreign record is only counted; a misrouted canary is an anomaly in the
    # verdicts table; anything else is invalid and goes to quarantine.
    kind = {FOREIGN: "foreign", MISROUTED: "anomaly"}.get(row.reason, "invalid")
    # Only a misrouted canary was verified: the others have no canary fields (they
    # reach the judge as 0, see SinkJob.build).
    verified = row.reason == MISROUTED
    return {
        "kind": kind,
        "probe_id": row.probe_id,  # as claimed, unauthenticated for an invalid record
        "target": row.target,
        "partition": row.partition if verified else row.kafka_partition,
        "incarnation": row.incarnation if verified else None,
        "seq": row.seq if verified else None,
        "produced_ns": None,
        "outcome": row.reason,
        "judged_ns": None,
        "kafka_partition": row.kafka_partition,
        "kafka_offset": row.kafka_offset,
        "trace_context": None,
        "value": row.value,
    }


def judged_row(
    kind: str, canary: Canary, outcome: str | None, now_ns: int, row: Any
) -> dict[str, object]:
    return {
        "kind": kind,
        "probe_id": canary.probe_id,
        "target": canary.target,
        "partition": canary.partition,
        "incarnation": canary.incarnation,
        "seq": canary.seq,
        "produced_ns": canary.produced_ns,
        "outcome": outcome,
        "judged_ns": now_ns,
        "kafka_partition": row.kafka_partition,
        "kafka_offset": row.kafka_offset,
        "trace_context": canary.trace_context,
        "value": None,
    }


def finding_row(
    finding: Finding,
    incarnation: int | None,
    now_ns: int,
    row: Any,
    produced_ns: int | None,
) -> dict[str, object]:
    is_fate = isinstance(finding, Fate)
    return {
        "kind": "fate" if is_fate else "anomaly",
        "probe_id": finding.key.probe_id,
        "target": finding.key.target,
        "partition": finding.key.partition,
        "incarnation": incarnation,
        "seq": finding.seq,
        "produced_ns": produced_ns,
        "outcome": finding.outcome.value if isinstance(finding, Fate) else finding.kind.value,
        "judged_ns": now_ns,
        "kafka_partition": None if row is None else row.kafka_partition,
        "kafka_offset": None if row is None else row.kafka_offset,
        "trace_context": finding.trace_context if isinstance(finding, Fate) else None,
        "value": None,
    }


def at_commit(rows: pd.DataFrame, commit_ns: int, freshness_ns: int) -> pd.DataFrame:
    """The judged rows as a reader of the table sees them: the latency of every
    arrived canary is produce to sink commit (column ``latency_ns``), and delivered or
    late follows from it by the judge's own rule.

    The stateful judge decides arrivals with the batch's start time (all it knows);
    the batch's own run time comes on top. Deciding again at commit keeps the verdicts
    table, the outcome counters and the latency histogram in agreement. Only
    delivered and late swap: which canaries got a fate is the judge's.
    """
    arrived = (rows["kind"] == "fate") & rows["outcome"].isin(
        [Outcome.DELIVERED.value, Outcome.LATE.value]
    )
    rows = rows.assign(latency_ns=pd.Series(pd.NA, index=rows.index, dtype="Int64"))
    if not arrived.any():
        return rows
    latency = (commit_ns - rows.loc[arrived, "produced_ns"].astype("int64")).clip(lower=0)
    rows.loc[arrived, "latency_ns"] = latency
    rows.loc[arrived, "outcome"] = [arrival_outcome(int(ns), freshness_ns).value for ns in latency]
    return rows


def finding_of(row: Any, target: str) -> Finding | None:
    """The finding a judged row stands for (the inverse of the builders above), or
    None for a row that is not one: a canary for the table, an invalid record.
    ``target`` is the sink's, for a foreign record (which names none)."""
    if row.kind == "foreign":
        return Anomaly(StreamKey("", target, int(row.kafka_partition)), -1, AnomalyKind.FOREIGN)
    if row.kind not in ("fate", "anomaly"):
        return None
    key = StreamKey(str(row.probe_id), str(row.target), int(row.partition))
    if row.kind == "anomaly":
        kind = AnomalyKind(row.outcome)
        lead_ns = None
        if kind is AnomalyKind.FUTURE_DATED:  # judged before it was produced, by the stamps
            lead_ns = int(row.produced_ns) - int(row.judged_ns)
        return Anomaly(key, int(row.seq), kind, lead_ns)
    outcome = Outcome(row.outcome)
    latency = None if pd.isna(row.latency_ns) else int(row.latency_ns)
    trace_context = None if pd.isna(row.trace_context) else str(row.trace_context)
    return Fate(key, int(row.seq), outcome, latency, trace_context)

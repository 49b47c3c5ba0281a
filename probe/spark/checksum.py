"""The canonical record and its checksum: one Spark SQL expression for both sides.

Reconciliation compares a topic's records with a table's rows. Both sides are first
reduced to the same **canonical record**, a fixed list of typed columns, then hashed
by :func:`record_checksum` (Spark's ``xxhash64``, computed on the executors). How a
Kafka record becomes its canonical record is the table's **format**:

``raw``
    The record's value bytes, against one table column holding them (binary, or a
    string compared as its UTF-8 bytes). Any change to a byte shows.
``json``
    The value parsed as a JSON object, its fields named by the table's checksum
    columns and typed as the table types them (Spark's ``from_json``).
``canary``
    The sink stage's ``canaries/`` table, which keeps the canary's fields and not the
    raw record: the source record is decoded and verified with the probe's canary
    codec and key ring (exactly as the sink stage classifies it), and its signed
    fields are the canonical record: probe id, incarnation, target, partition, seq,
    produce time and trace context. A row altered in the table (any of those fields)
    no longer matches what was signed into the topic. Records the sink stage does not
    put in ``canaries/`` (rejected into ``quarantine/``, foreign, misrouted) are
    ``excluded``: the table is not meant to hold them.

``xxhash64`` is part of Spark SQL's semantics (seed 42, the same on every version and
platform), so a checksum computed on one cluster compares with one from another. It
is 64 bits and not cryptographic: it catches corruption and mistakes, not forgery
(canaries are signed for that). Nulls would leave Spark's hash unchanged, so each
column is followed by its null flag: ``(null, "a")`` and ``("a", null)`` differ.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from enum import StrEnum

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)


class RecordFormat(StrEnum):
    """How a Kafka record becomes the canonical record its table row must match."""

    CANARY = "canary"
    RAW = "raw"
    JSON = "json"


# The canary's signed fields, as the sink's canaries/ table types them.
CANARY_FIELDS = StructType(
    [
        StructField("probe_id", StringType()),
        StructField("incarnation", LongType()),
        StructField("target", StringType()),
        StructField("partition", IntegerType()),
        StructField("seq", LongType()),
        StructField("produced_ns", LongType()),
        StructField("trace_context", StringType()),
    ]
)

# A decoded source record: where it was read, whether the sink would keep it in
# canaries/, and its canonical fields when it would.
DECODED_CANARY = StructType(
    [
        StructField("kafka_partition", IntegerType()),
        StructField("kafka_offset", LongType()),
        StructField("in_table", BooleanType()),
        *CANARY_FIELDS.fields,
    ]
)

MOD_64 = Decimal(2**64)


def record_checksum(columns: Sequence[Column]) -> Column:
    """The 64-bit checksum of a canonical record (its columns in order), as a long."""
    flagged: list[Column] = []
    for column in columns:
        flagged += [column, column.isNull()]
    return F.xxhash64(*flagged)


def unsigned(checksum: Column) -> Column:
    """A checksum as the unsigned number it stands for (decimal): sums of them never
    overflow a window, where a sum of longs would (an error under ANSI SQL)."""
    as_decimal = checksum.cast("decimal(20,0)")
    return F.when(checksum < 0, as_decimal + F.lit(MOD_64)).otherwise(as_decimal)


def window_checksum(total: Decimal | int | None) -> str:
    """A window's checksum, the sum of its records' checksums modulo 2**64, as 16 hex
    digits: the same for the same records in any order.

    >>> window_checksum(2**64 + 255)
    '00000000000000ff'
    """
    return f"{int(total or 0) % 2**64:016x}"


def decode_canaries(
    keyring_json: str, max_size: int, probe_id: str
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The executor-side decoder (mapInArrow) of the canary format: each record's
    canonical fields, and whether the sink stage keeps it in canaries/.

    It classifies as the stages do (a batch at a time, probe.spark.verify), so a
    record the sink rejects, counts as foreign, or judges misrouted (read from another
    partition than it names) is not expected in the table. Never raises for hostile
    bytes.
    """

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from probe.core.keys import KeyRing  # noqa: PLC0415 - runs on the executors
        from probe.spark.verify import verify  # noqa: PLC0415

        keyring = KeyRing.from_json(keyring_json)
        for batch in batches:
            kafka_partition = batch.column("partition").cast(pa.int32())
            verdicts = verify(batch.column("value"), keyring, probe_id, max_size=max_size)
            kept = pc.fill_null(
                pc.and_(pa.array(verdicts.canary), pc.equal(verdicts.partition, kafka_partition)),
                False,
            )

            def only_kept(column: pa.Array, kept: pa.Array = kept) -> pa.Array:
                return pc.if_else(kept, column, pa.scalar(None, column.type))

            yield pa.RecordBatch.from_arrays(
                [
                    kafka_partition,
                    batch.column("offset").cast(pa.int64()),
                    kept,
                    only_kept(verdicts.probe_id),
                    only_kept(verdicts.incarnation),
                    only_kept(verdicts.target),
                    only_kept(verdicts.partition),
                    only_kept(verdicts.seq),
                    only_kept(verdicts.produced_ns),
                    only_kept(verdicts.trace_context),
                ],
                names=DECODED_CANARY.fieldNames(),
            )

    return decode

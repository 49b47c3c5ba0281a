"""The sink's rows keep nanoseconds exact when a batch also holds nulls.

pandas turns a column of integers and nulls into float64, which rounds produce times
and incarnations (above 2**53) by a few hundred nanoseconds. Reconciliation found
it: the canaries of a micro-batch that also held a rejected record (or a loss) were
written a little off, and their checksums no longer matched the topic's."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
from pyspark.sql import SparkSession

from probe.core.canary import Canary, encode
from probe.core.keys import generate_key_ring
from probe.spark.rows import DECODED, JUDGED, decode_batches, typed_frame
from probe.spark.sink import exact_frame

PRODUCED_NS = 1_795_000_000_123_456_789
INCARNATION = 1_795_000_000_987_654_321


def test_a_batch_mixing_a_canary_and_a_rejected_record_decodes_exactly() -> None:
    ring = generate_key_ring()
    canary = Canary("probe-a", INCARNATION, "kafka", 0, 7, PRODUCED_NS)
    batch = pa.RecordBatch.from_pydict(
        {
            "partition": pa.array([0, 0], pa.int32()),
            "offset": pa.array([10, 11], pa.int64()),
            "value": pa.array([encode(canary, ring), b"\x00junk"], pa.binary()),
        }
    )
    (decoded,) = decode_batches(ring.to_json(), 65536, "probe-a")(iter([batch]))
    assert decoded.column("produced_ns").to_pylist() == [PRODUCED_NS, None]
    assert decoded.column("incarnation").to_pylist() == [INCARNATION, None]
    assert decoded.schema.names == DECODED.fieldNames()


def test_judged_rows_with_nulls_reach_the_driver_exactly(spark: SparkSession) -> None:
    """The judge's frame (a canary beside a loss, which has no offset) and the batch's
    trip through Spark to the driver, as the sink's commit reads it."""
    rows: list[dict[str, object]] = [
        dict.fromkeys(JUDGED.fieldNames()) | {"kind": "canary", "produced_ns": PRODUCED_NS,
                                               "incarnation": INCARNATION, "kafka_offset": 3},
        dict.fromkeys(JUDGED.fieldNames()) | {"kind": "fate", "outcome": "lost"},
    ]  # fmt: skip
    frame = typed_frame(rows, JUDGED)
    back = exact_frame(spark.createDataFrame(frame, JUDGED))
    canary = back[back["kind"] == "canary"].iloc[0]
    assert (int(canary["produced_ns"]), int(canary["incarnation"])) == (PRODUCED_NS, INCARNATION)
    assert pd.isna(back[back["kind"] == "fate"].iloc[0]["kafka_offset"])


def test_every_judged_frame_converts_for_spark_the_empty_one_included() -> None:
    """The stateful judge's output goes through Spark's own pandas-to-Arrow conversion.
    An empty frame (a timer that found nothing due, records all read before) once had
    float64 columns that Arrow made ChunkedArrays of, and the batch failed, again at
    every restart (the sink crash-looped after an unclean election)."""
    from pyspark.sql.conversion import PandasToArrowConversion  # noqa: PLC0415
    from pyspark.sql.types import StructField, StructType  # noqa: PLC0415

    output = StructType([StructField("judged", JUDGED)])
    finding = {field.name: None for field in JUDGED.fields} | {"kind": "finding", "seq": 3}
    for rows in ([], [finding]):
        batch = PandasToArrowConversion.convert(
            [typed_frame(rows, JUDGED)], output, timezone="UTC", safecheck=True,
            arrow_cast=True, assign_cols_by_name=True, int_to_decimal_coercion_enabled=False,
        )  # fmt: skip
        assert batch.num_rows == len(rows)
        assert batch.column(0).to_pylist() == rows

"""The reconciliation job on real Spark against the real broker and real Parquet
tables, in the generic formats (raw bytes, JSON fields): what each discrepancy looks
like, and windows by offsets and by time."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from probe.core.errors import ConfigError, ReconcileFailed
from probe.core.offset_ranges import OffsetRange
from probe.embedded import EmbeddedBroker
from probe.reconcile import job as job_module
from probe.reconcile.job import ReconcileJob, ReconcileSettings
from probe.reconcile.outcome import Reconciliation, WindowStatus
from probe.reconcile.windows import WindowSpec
from probe.spark.checksum import RecordFormat
from probe.spark.topic_offsets import TopicOffsets
from tests.conftest import SLA_PROBE, until, wait_for
from tests.spark.test_kafka_source import _create, _produce

Row = dict[str, object]


def _value(partition: int, offset: int) -> bytes:
    # What tests.spark.test_kafka_source._produce writes with tag "r".
    return f"r-{partition}-{offset}".encode()


def _table(path: Path, rows: list[Row], schema: pa.Schema) -> str:
    """A table as a sink writes one: a directory of Parquet files."""
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path / "part-00000.parquet")
    return str(path)


RAW = pa.schema(
    [("kafka_partition", pa.int32()), ("kafka_offset", pa.int64()), ("value", pa.binary())]
)


def _raw_rows(per_partition: dict[int, int]) -> list[Row]:
    return [
        {"kafka_partition": p, "kafka_offset": o, "value": _value(p, o)}
        for p, count in per_partition.items()
        for o in range(count)
    ]


def _job(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    table: str,
    clock_ms: Callable[[], int] | None = None,
    **overrides: object,
) -> ReconcileJob:
    values: dict[str, object] = {
        "bootstrap_servers": broker.bootstrap_servers,
        "topic": topic,
        "table": table,
        "window": WindowSpec(offsets=10),
        "settle_s": 1.0,
        "lookback_s": None,
        "record_format": RecordFormat.RAW,
        "sample_size": 3,
    }
    values.update(overrides)
    settings = ReconcileSettings(**values)  # type: ignore[arg-type]
    return ReconcileJob(spark, settings, clock_ms or _settled_clock)


# Where the records are read: a small run reads them on the driver, a large one (or
# any, with driver_read_records 0) on the executors; both must judge alike.
READS = {"driver": {}, "executors": {"driver_read_records": 0}}
read_on = pytest.mark.parametrize("read_on", list(READS))


def _settled_clock() -> int:
    """Ten seconds from now: everything produced so far is older than the settle
    delay these tests use, however fast they run."""
    return int(time.time() * 1000) + 10_000


def _by_window(run: Reconciliation) -> dict[tuple[int, int], tuple[WindowStatus, int, int]]:
    return {
        (r.window.partition, r.window.start): (r.status, r.tally.source, r.tally.sink)
        for r in run.windows
    }


@read_on
async def test_a_table_holding_every_record_once_is_complete(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path, read_on: str
) -> None:
    await _create(broker, topic, 3)
    _produce(broker, topic, {0: 12, 1: 5, 2: 0}, "r")
    table = _table(tmp_path / "t", _raw_rows({0: 12, 1: 5}), RAW)
    run = _job(spark, broker, topic, table, **READS[read_on]).run("run-1")
    assert _by_window(run) == {
        (0, 0): (WindowStatus.COMPLETE, 10, 10),
        (0, 10): (WindowStatus.COMPLETE, 2, 2),
        (1, 0): (WindowStatus.COMPLETE, 5, 5),
    }
    assert run.exit_code == 0
    for result in run.windows:
        # Both sides hold the same records: the same window checksum.
        assert result.tally.source_checksum == result.tally.sink_checksum != "0" * 16


async def test_many_partitions_are_read_in_a_few_tasks_every_record_matched(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """More partitions than read tasks (at most READ_WAVES a core): the ranges are read
    in groups, one consumer a task, and every record of every partition is compared."""
    partitions = 4 * job_module.READ_WAVES * spark.sparkContext.defaultParallelism + 3
    counts = {p: 1 + p % 3 for p in range(partitions) if p % 5}
    await _create(broker, topic, partitions)
    _produce(broker, topic, counts, "r")
    table = _table(tmp_path / "t", _raw_rows(counts), RAW)
    run = _job(spark, broker, topic, table, **READS["executors"]).run("grouped")
    assert _by_window(run) == {(p, 0): (WindowStatus.COMPLETE, n, n) for p, n in counts.items()}
    assert run.exit_code == 0


@read_on
async def test_each_discrepancy_is_counted_and_named_by_partition_window_and_offset(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path, read_on: str
) -> None:
    await _create(broker, topic, 3)
    _produce(broker, topic, {0: 10, 1: 10, 2: 10}, "r")
    rows = _raw_rows({0: 10, 1: 10, 2: 10})
    by_key = {(r["kafka_partition"], r["kafka_offset"]): r for r in rows}
    del by_key[(1, 3)], by_key[(1, 8)]  # two rows lost
    by_key[(2, 4)] = {**by_key[(2, 4)], "value": b"r-2-4 but changed"}  # one altered
    table_rows = [*by_key.values(), by_key[(0, 7)]]  # one written twice
    table = _table(tmp_path / "t", table_rows, RAW)
    run = _job(spark, broker, topic, table, **READS[read_on]).run("run-2")
    assert run.exit_code == 1
    p0, p1, p2 = run.windows
    assert (p0.status, p0.tally.duplicated, p0.tally.samples.duplicated) == (
        WindowStatus.MISMATCH,
        1,
        (7,),
    )
    assert (p0.tally.source, p0.tally.sink, p0.tally.matched) == (10, 11, 10)
    assert (p1.tally.missing, p1.tally.samples.missing, p1.tally.sink) == (2, (3, 8), 8)
    assert (p2.tally.mismatched, p2.tally.samples.mismatched, p2.tally.matched) == (1, (4,), 9)
    assert p0.tally.source_checksum != p0.tally.sink_checksum
    assert p2.tally.source_checksum != p2.tally.sink_checksum
    assert run.records()["missing"] == 2


async def test_rows_swapped_between_offsets_are_mismatched_though_the_sums_agree(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """Two rows whose values are swapped: the window has as many rows as records and
    the same checksum sum, so only the fingerprint (a checksum bound to its offset)
    tells it from a complete one, and the join then names both offsets."""
    await _create(broker, topic, 1)
    _produce(broker, topic, {0: 6}, "r")
    rows = _raw_rows({0: 6})
    rows[2]["value"], rows[3]["value"] = rows[3]["value"], rows[2]["value"]
    run = _job(spark, broker, topic, _table(tmp_path / "t", rows, RAW)).run("swapped")
    (window,) = run.windows
    assert window.status is WindowStatus.MISMATCH
    assert window.tally.source_checksum == window.tally.sink_checksum
    assert (window.tally.mismatched, window.tally.samples.mismatched) == (2, (2, 3))
    assert (window.tally.matched, window.tally.missing, window.tally.extra) == (4, 0, 0)


async def test_records_newer_than_the_settle_delay_are_not_compared(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """Records produced after `now - settle` are on their way: not missing."""
    await _create(broker, topic, 1)
    _produce(broker, topic, {0: 6}, "r")
    # Records carry the producer's clock in milliseconds: the split lies strictly
    # after the last one produced, strictly before the first one after.
    split_ms = int(time.time() * 1000) + 1
    wait_for(lambda: time.time() * 1000 >= split_ms + 1, timeout=5, what="the clock to move")
    _produce(broker, topic, {0: 4}, "in-flight")  # offsets 6..9, not in the table yet
    offsets = TopicOffsets({"bootstrap.servers": broker.bootstrap_servers, "topic": topic})
    try:
        assert offsets.at_times({"0": split_ms}) == {"0": 6}
    finally:
        offsets.close()
    table = _table(tmp_path / "t", _raw_rows({0: 6}), RAW)
    settle_s = 60.0
    now = split_ms + int(settle_s * 1000)  # the moment the split settles
    settled = _job(spark, broker, topic, table, lambda: now, settle_s=settle_s).run("settled")
    assert _by_window(settled) == {(0, 0): (WindowStatus.COMPLETE, 6, 6)}
    # Once they have settled, those records are missing.
    later = _job(spark, broker, topic, table).run("later")
    assert later.windows[0].tally.missing == 4
    assert later.windows[0].tally.samples.missing == (6, 7, 8)


async def test_json_fields_are_compared_as_the_table_types_them(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    await _create(broker, topic, 1)
    from confluent_kafka import Producer  # noqa: PLC0415

    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    orders = [{"id": i, "item": f"item-{i}", "qty": i % 3} for i in range(5)]
    for order in orders:
        producer.produce(topic, json.dumps(order).encode(), partition=0)
        assert producer.flush(10) == 0
    schema = pa.schema(
        [
            ("kafka_partition", pa.int32()),
            ("kafka_offset", pa.int64()),
            ("id", pa.int64()),
            ("item", pa.string()),
            ("qty", pa.int32()),
        ]
    )
    rows: list[Row] = [{"kafka_partition": 0, "kafka_offset": i, **o} for i, o in enumerate(orders)]
    rows[2] = {**rows[2], "qty": 7}
    table = _table(tmp_path / "orders", rows, schema)
    run = _job(
        spark,
        broker,
        topic,
        table,
        record_format=RecordFormat.JSON,
        checksum_columns=("id", "item", "qty"),
    ).run("json")
    (window,) = run.windows
    assert (window.tally.matched, window.tally.mismatched, window.tally.samples.mismatched) == (
        4,
        1,
        (2,),
    )


async def test_time_windows_place_records_by_their_first_offset_at_each_boundary(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    await _create(broker, topic, 2)
    _produce(broker, topic, {0: 4, 1: 3}, "r")
    rows = [
        r for r in _raw_rows({0: 4, 1: 3}) if (r["kafka_partition"], r["kafka_offset"]) != (0, 2)
    ]
    table = _table(tmp_path / "t", rows, RAW)
    run = _job(
        spark,
        broker,
        topic,
        table,
        window=WindowSpec(duration_ms=1000),
        lookback_s=60.0,
    ).run("time")
    filled = [r for r in run.windows if r.tally.source]
    assert sum(r.tally.source for r in run.windows) == 7
    assert all(r.window.start_ms is not None for r in run.windows)
    (broken,) = [r for r in filled if r.status is WindowStatus.MISMATCH]
    assert (broken.window.partition, broken.tally.samples.missing) == (0, (2,))
    assert broken.window.start <= 2 < broken.window.end
    # Every second of the last minute, on both partitions.
    assert len(run.windows) in (2 * 59, 2 * 60)


ORDERS = pa.schema(
    [
        ("id", pa.int64()),
        ("item", pa.string()),
        ("qty", pa.int32()),
        ("written_at", pa.timestamp("ms", tz="UTC")),
    ]
)


async def test_a_table_matched_by_key_names_each_discrepancy(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """A table with no Kafka columns: rows matched to records by the value's id,
    rows no record holds counted extra where the time column places them."""
    await _create(broker, topic, 2)
    from confluent_kafka import Producer  # noqa: PLC0415

    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    orders = [{"id": i, "item": f"item-{i}", "qty": i % 3} for i in range(8)]
    for order in orders:  # even ids to partition 0, odd to 1: offset = id // 2
        producer.produce(topic, json.dumps(order).encode(), partition=order["id"] % 2)
        # One record per batch: the embedded broker times a batch's later records
        # wrongly for offsets_for_times, which would cut the settled windows short.
        assert producer.flush(10) == 0
    written = datetime.now(UTC)
    rows: list[Row] = [{**o, "written_at": written} for o in orders]
    rows[4] = {**rows[4], "qty": 9}  # altered
    del rows[3]  # lost: id 3, partition 1, offset 1
    rows.append(rows[0])  # written twice: id 0
    rows.append({"id": 99, "item": "stray", "qty": 1, "written_at": written})  # extra
    # An old row of a record long gone: out of the compared time, not judged.
    long_ago = datetime(2020, 1, 1, tzinfo=UTC)
    rows.append({"id": 500, "item": "old", "qty": 1, "written_at": long_ago})
    table = _table(tmp_path / "orders", rows, ORDERS)
    run = _job(
        spark,
        broker,
        topic,
        table,
        record_format=RecordFormat.JSON,
        checksum_columns=("id", "item", "qty"),
        key_column="id",
        source_key="id",
        time_column="written_at",
        lookback_s=600.0,
    ).run("by-key")
    assert run.exit_code == 1
    p0, p1, by_time = run.windows
    assert (p0.window.partition, p1.window.partition, by_time.window.partition) == (0, 1, None)
    # id 0 twice (offset 0), id 4 altered (offset 2).
    assert (p0.tally.source, p0.tally.sink, p0.tally.matched) == (4, 5, 3)
    assert (p0.tally.duplicated, p0.tally.samples.duplicated) == (1, (0,))
    assert (p0.tally.mismatched, p0.tally.samples.mismatched) == (1, (2,))
    # id 3 lost: named by its offset on partition 1.
    assert (p1.tally.missing, p1.tally.samples.missing, p1.tally.matched) == (1, (1,), 3)
    assert (by_time.tally.extra, by_time.tally.samples.extra_keys) == (1, ("99",))
    assert by_time.tally.sink == 1  # not the 2020 row
    assert run.records()["matched"] == 6


async def test_a_table_matched_by_the_record_key_without_a_time_column(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    await _create(broker, topic, 1)
    from confluent_kafka import Producer  # noqa: PLC0415

    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(5):
        producer.produce(topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=0)
        assert producer.flush(10) == 0  # one record per batch, as above
    producer.produce(topic, b"no key", partition=0)  # offset 5: no row can match it
    assert producer.flush(10) == 0
    schema = pa.schema([("order_key", pa.string()), ("payload", pa.binary())])
    rows: list[Row] = [{"order_key": f"k{i}", "payload": f"v{i}".encode()} for i in (0, 1, 3, 4)]
    rows.append({"order_key": "stray", "payload": b"?"})  # no time column: not judged
    table = _table(tmp_path / "t", rows, schema)
    run = _job(
        spark, broker, topic, table, checksum_columns=("payload",), key_column="order_key"
    ).run("record-key")
    (window,) = run.windows
    assert (window.tally.source, window.tally.excluded, window.tally.sink) == (5, 1, 4)
    assert (window.tally.missing, window.tally.samples.missing) == (1, (2,))
    assert (window.tally.matched, window.tally.extra) == (4, 0)
    assert window.tally.source_checksum != window.tally.sink_checksum


async def test_a_small_run_reads_on_the_driver_within_its_bounds(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every record of the ranges, read here; none when the ranges hold more offsets
    than the driver reads, or the records more bytes: the executors read them then."""
    await _create(broker, topic, 2)
    _produce(broker, topic, {0: 4, 1: 3}, "r")
    ranges = [OffsetRange(topic, 0, 0, 4), OffsetRange(topic, 1, 0, 3)]
    job = _job(spark, broker, topic, str(tmp_path / "t"))
    read = job._read_on_driver(ranges)
    assert read is not None
    read_back = zip(read["partition"].to_pylist(), read["value"].to_pylist(), strict=True)
    assert sorted(read_back) == [(p, _value(p, o)) for p, n in ((0, 4), (1, 3)) for o in range(n)]
    assert _job(spark, broker, topic, "t", driver_read_records=6)._read_on_driver(ranges) is None
    monkeypatch.setattr(job_module, "DRIVER_READ_BYTES", read.nbytes - 1)
    assert job._read_on_driver(ranges) is None


def test_a_table_without_the_named_columns_is_a_config_error(
    spark: SparkSession, tmp_path: Path, broker: EmbeddedBroker, topic: str
) -> None:
    table = _table(tmp_path / "t", [{"kafka_partition": 0, "kafka_offset": 0, "value": b""}], RAW)
    job = _job(spark, broker, topic, table, offset_column="offset")
    with pytest.raises(ConfigError, match=r"^reconcile\.table: .* has no column offset"):
        job._sink(
            spark.createDataFrame(
                [], "plan_partition int, window_start long, window_end long, window int"
            ),
            job._sink_table(),
        )
    with pytest.raises(ConfigError, match=r"^reconcile\.table: no Parquet table at"):
        _job(spark, broker, topic, str(tmp_path / "nowhere"))._sink_table()


def test_a_run_that_cannot_compare_fails_saying_why(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    table = _table(tmp_path / "t", _raw_rows({0: 1}), RAW)
    with pytest.raises(ReconcileFailed, match=f"topic '{topic}-missing' not found"):
        _job(spark, broker, f"{topic}-missing", table).run("no-topic")


async def test_the_command_creates_a_sink_path_and_a_class_archive_later_runs_map(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """`sla-probe reconcile --table T --sink-path DIR`, DIR not there yet: the command
    writes there (Spark's log, the report table), so it creates it. It once ended in a
    traceback instead: Spark's log file not found.

    A single run also leaves Spark's class archive (probe.spark.class_archive) where
    none was, and the next run's JVM maps it: told ``-Xshare:on``, a JVM that cannot
    map its archive refuses to start."""
    await _create(broker, topic, 2)
    _produce(broker, topic, {0: 3, 1: 2}, "r")
    table = _table(tmp_path / "t", _raw_rows({0: 3, 1: 2}), RAW)
    sink_path = tmp_path / "not-yet" / "sink"
    archives = tmp_path / "archives"
    produced = time.time()
    await until(lambda: time.time() > produced + 1.1, within=5, what="every record settled")

    def reconcile(*more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [SLA_PROBE, "reconcile", "--bootstrap-servers", broker.bootstrap_servers,
             "--topic", topic, "--table", table, "--format", "raw", "--window-offsets", "10",
             "--settle", "1s", "--json", *more],
            capture_output=True, text=True, timeout=300, check=False,
            env={**os.environ, "SLA_PROBE_CLASS_ARCHIVES": str(archives)},
        )  # fmt: skip

    result = await asyncio.to_thread(reconcile, "--sink-path", str(sink_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert json.loads(result.stdout)["ok"] is True
    assert (sink_path / "spark.log").stat().st_size > 0
    assert list((sink_path / "reconciliation").rglob("*.parquet"))
    written = [p.name for p in archives.iterdir()]
    assert len(written) == 1, written
    assert written[0].endswith(".jsa"), written

    strict = tmp_path / "strict.yaml"
    strict.write_text(
        "sink:\n  spark_conf:\n    spark.driver.extraJavaOptions: -Xss4m -Xshare:on\n"
    )
    again = await asyncio.to_thread(
        reconcile, "--sink-path", str(tmp_path / "again"), "--config", str(strict)
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout)["ok"] is True
    assert [p.name for p in archives.iterdir()] == written

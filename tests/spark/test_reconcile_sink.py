"""`sla-probe reconcile` against the tables of a real sink run: the real broker, the
real sink stage on real Spark, real Parquet, the command's exit codes and outputs.

One sink run (module fixture) writes the tables; each test reconciles a copy of them,
damaged the way the test needs.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import pytest_asyncio
from click.testing import CliRunner
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from probe.cli import main
from probe.config import ProbeConfig, StageName, load
from probe.embedded import EmbeddedBroker, free_loopback_port
from probe.reconcile.outcome import Reconciliation, RecordResult
from probe.reconcile.reconciler import Reconciler
from probe.services.reconcile import serve_reconcile
from tests.conftest import Samples, http_status, sample, scrape, until, wait_for
from tests.spark.test_sink import pipeline

ROUNDS = 4
PARTITIONS = 3


@dataclass(frozen=True)
class SinkRun:
    """What the sink run left: its tables when it had caught up with everything, and
    while one round was still held back (in flight), and when that round was produced."""

    topic: str
    bootstrap_servers: str
    key_file: Path
    complete: Path  # sink.path with every canary written
    held: Path  # sink.path with the last round not yet written
    in_flight_since_ms: int  # the held round was produced after this
    canaries: int  # in the complete table


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest_asyncio.fixture(scope="module")
async def sink_run(
    spark: SparkSession, broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[SinkRun]:
    root = tmp_path_factory.mktemp("reconcile-sink")
    topic = f"sla-{uuid.uuid4().hex[:10]}"
    async with pipeline(spark, broker, topic, root / "sink") as p:
        for _ in range(ROUNDS - 1):
            await p.probe.produce_round()
        # A record the sink rejects into quarantine/: never expected in canaries/.
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        producer.produce(topic, b"\x00not a canary", partition=0)
        assert producer.flush(10) == 0
        await p.probe.produce_round()
        sink = p.tally.stages
        await until(
            lambda: (
                p.sink_fates() >= ROUNDS * PARTITIONS
                and sum(sink[StageName.SINK].invalid.values()) == 1
            ),
            within=180,
            what="every canary and the hostile record through the sink",
        )
        # One more round, held back before the sink writes it: in flight.
        p.job.hold()
        in_flight_since_ms = _now_ms() + 1
        await asyncio.to_thread(
            wait_for, lambda: _now_ms() > in_flight_since_ms, timeout=5, what="the clock"
        )
        await p.probe.produce_round()
        consumer = sink[StageName.CONSUMER].outcomes
        await until(
            lambda: sum(consumer.values()) >= (ROUNDS + 1) * PARTITIONS,
            within=30,
            what="the held round in the topic",
        )
        shutil.copytree(p.settings.path, root / "held")
        p.job.resume()
        await until(
            lambda: p.sink_fates() >= (ROUNDS + 1) * PARTITIONS,
            within=120,
            what="the held round written",
        )
        key_file = root / "keys.json"
        key_file.write_text(p.keyring.to_json())
    shutil.copytree(root / "sink", root / "complete")
    canaries = pq.read_table(root / "complete" / "canaries").num_rows
    assert canaries == (ROUNDS + 1) * PARTITIONS
    yield SinkRun(
        topic,
        broker.bootstrap_servers,
        key_file,
        root / "complete",
        root / "held",
        in_flight_since_ms,
        canaries,
    )


def _copy(run_path: Path, tmp_path: Path) -> Path:
    """A copy of a sink's tables to damage (only canaries/ is read)."""
    copy = tmp_path / "sink"
    shutil.copytree(run_path / "canaries", copy / "canaries")
    return copy


def _reconcile(sink_run: SinkRun, sink_path: Path, *args: str) -> tuple[int, str, str]:
    """`sla-probe reconcile` in this process (on the tests' Spark session), settled:
    windows of 100 offsets, a settle delay of 1 s that every record is older than."""
    newest = _now_ms()
    wait_for(lambda: _now_ms() > newest + 1100, timeout=5, what="every record older than 1s")
    result = CliRunner().invoke(
        main,
        [
            "reconcile",
            "--bootstrap-servers", sink_run.bootstrap_servers,
            "--topic", sink_run.topic,
            "--sink-path", str(sink_path),
            "--signing-key-file", str(sink_run.key_file),
            "--window-offsets", "100",
            "--settle", "1s",
            *args,
        ],
    )  # fmt: skip
    return result.exit_code, result.stdout, result.stderr


def _config(sink_run: SinkRun, sink_path: Path, **more: str) -> ProbeConfig:
    """The probe's config for reconciling a copy of the sink's tables: windows of 100
    offsets, a settle delay of 1 s unless ``more`` says otherwise."""
    return load(
        overrides={
            "kafka.bootstrap_servers": sink_run.bootstrap_servers,
            "kafka.topic": sink_run.topic,
            "sink.path": str(sink_path),
            "signing_key_file": str(sink_run.key_file),
            "reconcile.window.offsets": "100",
            "reconcile.settle": "1s",
            **more,
        }
    )


def _batch_files(sink_path: Path) -> list[Path]:
    return sorted((sink_path / "canaries").glob("batch_id=*/*.parquet"))


def test_the_tables_of_a_real_sink_run_reconcile_complete(
    sink_run: SinkRun, tmp_path: Path
) -> None:
    sink_path = _copy(sink_run.complete, tmp_path)
    code, out, err = _reconcile(sink_run, sink_path, "--json", "--run-id", "first")
    assert code == 0, out + err
    report = json.loads(out)
    assert report["ok"] is True
    assert report["records"]["matched"] == sink_run.canaries
    assert report["discrepancies"] == 0
    windows = report["windows"]
    assert {w["partition"] for w in windows} == set(range(PARTITIONS))
    assert all(w["status"] == "complete" for w in windows)
    assert all(w["source_checksum"] == w["sink_checksum"] for w in windows)
    # The record the sink quarantined is not expected in canaries/.
    assert sum(w["excluded"] for w in windows) == 1
    # The report table: one row per window and partition, under its run id.
    rows = ds.dataset(sink_path / "reconciliation", partitioning="hive").to_table().to_pylist()
    assert len(rows) == len(windows)
    assert {r["run_id"] for r in rows} == {"first"}
    assert sum(r["matched"] for r in rows) == sink_run.canaries


def test_a_removed_batch_file_names_partition_window_and_missing_offsets(
    sink_run: SinkRun, tmp_path: Path
) -> None:
    sink_path = _copy(sink_run.complete, tmp_path)
    removed = _batch_files(sink_path)[1]
    lost = pq.read_table(removed).to_pylist()
    removed.unlink()
    code, out, err = _reconcile(sink_run, sink_path)
    assert code == 1, out + err
    for partition in {row["kafka_partition"] for row in lost}:
        offsets = sorted(r["kafka_offset"] for r in lost if r["kafka_partition"] == partition)
        expected = f"partition {partition}, window offsets 0-"
        line = next(line for line in out.splitlines() if line.startswith(expected))
        assert line.endswith(f": {len(offsets)} missing: offsets {', '.join(map(str, offsets))}")
    assert re.search(rf"^result: MISMATCH .*: {len(lost)} missing, 0 extra", out, re.M), out


def test_an_altered_row_is_a_checksum_mismatch(sink_run: SinkRun, tmp_path: Path) -> None:
    sink_path = _copy(sink_run.complete, tmp_path)
    target = _batch_files(sink_path)[0]
    table = pq.read_table(target)
    rows = table.to_pylist()
    rows[0]["produced_ns"] += 1  # one nanosecond off
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), target)
    code, out, err = _reconcile(sink_run, sink_path, "--json")
    assert code == 1, out + err
    (bad,) = [w for w in json.loads(out)["windows"] if w["status"] == "mismatch"]
    assert bad["partition"] == rows[0]["kafka_partition"]
    assert bad["checksum_mismatch"] == 1
    assert bad["missing"] == bad["extra"] == bad["duplicated"] == 0
    assert bad["samples"]["checksum_mismatch"] == [rows[0]["kafka_offset"]]
    assert bad["source_checksum"] != bad["sink_checksum"]


def test_a_duplicated_row_is_counted_duplicated(sink_run: SinkRun, tmp_path: Path) -> None:
    sink_path = _copy(sink_run.complete, tmp_path)
    first = _batch_files(sink_path)[0]
    copied = pq.read_table(first).slice(0, 1)
    again = sink_path / "canaries" / "batch_id=999999"
    again.mkdir()
    pq.write_table(copied, again / "part-00000.parquet")
    code, out, err = _reconcile(sink_run, sink_path, "--json")
    assert code == 1, out + err
    report = json.loads(out)
    assert report["records"]["duplicated"] == 1
    assert report["records"]["matched"] == sink_run.canaries
    (bad,) = [w for w in report["windows"] if w["status"] == "mismatch"]
    assert bad["samples"]["duplicated"] == [copied.to_pylist()[0]["kafka_offset"]]
    assert bad["sink"] == bad["source"] + 1


def test_the_executors_decode_and_verify_the_canaries_as_the_driver_does(
    spark: SparkSession, sink_run: SinkRun, tmp_path: Path
) -> None:
    """A run too large for the driver's read: the executors read, decode and verify
    the canaries, and judge exactly as a small run does on the driver."""
    config = _config(sink_run, _copy(sink_run.complete, tmp_path))
    reconciler = Reconciler(
        spark, config, sink_run.key_file.read_text(), clock_ms=lambda: _now_ms() + 10_000
    )
    reconciler.job.settings = replace(reconciler.job.settings, driver_read_records=0)
    run = reconciler.run()
    assert run.exit_code == 0
    assert run.records()[RecordResult.MATCHED] == sink_run.canaries
    # The record the sink quarantined is not expected in canaries/: verified there too.
    assert sum(w.tally.excluded for w in run.windows) == 1


def test_records_in_flight_are_not_missing_until_they_settle(
    spark: SparkSession, sink_run: SinkRun, tmp_path: Path
) -> None:
    """The last round is in the topic, held back before the sink wrote it."""
    sink_path = _copy(sink_run.held, tmp_path)
    settle_s = 30.0
    config = _config(sink_run, sink_path, **{"reconcile.settle": f"{settle_s:g}s"})

    def reconcile_at(now_ms: int) -> Reconciliation:
        return Reconciler(
            spark, config, sink_run.key_file.read_text(), clock_ms=lambda: now_ms
        ).run()

    # When the held round is younger than the settle delay: on its way, not missing.
    settling = reconcile_at(sink_run.in_flight_since_ms + int(settle_s * 1000))
    assert settling.exit_code == 0
    assert sum(w.tally.matched for w in settling.windows) == ROUNDS * PARTITIONS
    # Once it has settled and the sink still has not written it: missing, one per partition.
    settled = reconcile_at(_now_ms() + int(settle_s * 1000))
    assert settled.exit_code == 1
    assert [w.tally.missing for w in settled.windows] == [1] * PARTITIONS


async def test_every_keeps_reconciling_and_serves_metrics_and_readiness(
    spark: SparkSession, sink_run: SinkRun, tmp_path: Path
) -> None:
    sink_path = _copy(sink_run.complete, tmp_path)
    (_batch_files(sink_path)[0]).unlink()
    port = free_loopback_port()
    config = _config(
        sink_run,
        sink_path,
        **{"reconcile.every": "1s", "metrics.host": "127.0.0.1", "metrics.port": str(port)},
    )
    stop = asyncio.Event()
    service = asyncio.create_task(
        serve_reconcile(config, sink_run.key_file.read_text(), stop, spark=spark)
    )

    # The service answers on this event loop: scrape from a thread, never blocking it.
    async def metrics() -> Samples:
        return await asyncio.to_thread(scrape, port)

    async def runs(result: str) -> float:
        return sample(await metrics(), "synthetic_sla_reconciliation_runs_total", result=result)

    async def status(path: str) -> int:
        return await asyncio.to_thread(http_status, port, path)

    try:
        await until(
            lambda: _at_least(runs("mismatch"), 2), within=180, what="two reconciliation runs"
        )
        samples = await metrics()
        assert await status("/readyz") == 200
        assert sample(samples, "synthetic_sla_reconciliation_records_total", result="missing") > 0
        assert 0 < sample(samples, "synthetic_sla_reconciliation_mismatch_ratio") < 1
        last = sample(samples, "synthetic_sla_reconciliation_last_success_timestamp_seconds")
        assert time.time() - 120 < last <= time.time()
        assert sample(samples, "synthetic_sla_reconciliation_duration_seconds_count") >= 2
        assert await runs("failed") == 0
        # The table goes away: the service stays up, not ready, saying why.
        shutil.rmtree(sink_path / "canaries")

        async def not_ready() -> bool:
            return await status("/readyz") == 503

        await until(not_ready, within=120, what="/readyz 503")
        assert await runs("failed") >= 1
    finally:
        stop.set()
        await asyncio.wait_for(service, 60)
    assert await status("/metrics") == 0  # stopped serving


async def _at_least(value: Awaitable[float], minimum: float) -> bool:
    return await value >= minimum


def test_a_table_that_does_not_fit_is_a_config_error(sink_run: SinkRun, tmp_path: Path) -> None:
    sink_path = _copy(sink_run.complete, tmp_path)
    code, out, err = _reconcile(sink_run, sink_path, "--partition-column", "kafka_partiton")
    assert code == 2, out + err
    assert err.splitlines() == [
        line for line in err.splitlines() if line.startswith("sla-probe: config error:")
    ]
    assert err.startswith("sla-probe: config error: reconcile.table: ")
    assert "has no column kafka_partiton" in err


# --- Right after a sink run, with the default windows: nothing compared yet ------------

WINDOW_MS = 5 * 60_000  # reconcile.window.duration's default
SETTLE_MS = 30_000  # reconcile.settle's default: sink.freshness
# From the first record produced to the last command run on the real clock below: two
# rounds through the sink, then three reconciliations that compare nothing (about 15 s
# on the warm session). A window with less left is waited out; the commands have this
# plus the settle delay before the verdict's moment.
SCENARIO_MS = 60_000


async def test_right_after_a_sink_run_nothing_is_compared_and_it_says_when(
    spark: SparkSession, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """A new user's first reconcile, with every default: records written a moment
    ago sit in a 5-minute window still open. It used to answer `ok: true`, every
    window `complete`, 0 records matched, exit 0, with a Parquet file of the table
    deleted too. Now: not a pass (exit 3), the pending records counted, the moment
    they are compared named; and at that moment, they are."""
    topic = f"sla-{uuid.uuid4().hex[:10]}"
    async with pipeline(spark, broker, topic, tmp_path / "run") as p:
        # The records' window must stay open through the commands below: start clear
        # of its end (the scenario is "right after", not "just before a boundary").
        left = WINDOW_MS - _now_ms() % WINDOW_MS
        if left < SCENARIO_MS:
            await asyncio.sleep(left / 1000 + 0.5)
        first_ms = _now_ms()
        await p.probe.produce_round()
        await until(lambda: p.sink_fates() >= PARTITIONS, within=120, what="a round written")
        await p.probe.produce_round()
        await until(lambda: p.sink_fates() >= 2 * PARTITIONS, within=60, what="two rounds")
        key_file = tmp_path / "keys.json"
        key_file.write_text(p.keyring.to_json())
    whole = _copy(tmp_path / "run", tmp_path / "whole")
    short = _copy(tmp_path / "run", tmp_path / "short")
    files = _batch_files(short)
    assert len(files) >= 2, files
    files[0].unlink()
    compared_from_ms = first_ms - first_ms % WINDOW_MS + WINDOW_MS + SETTLE_MS

    def reconcile(sink_path: Path, *args: str) -> tuple[int, str, str]:
        result = CliRunner().invoke(
            main,
            [
                "reconcile",
                "--bootstrap-servers", broker.bootstrap_servers,
                "--topic", topic,
                "--sink-path", str(sink_path),
                "--signing-key-file", str(key_file),
                *args,
            ],
        )  # fmt: skip
        return result.exit_code, result.stdout, result.stderr

    for sink_path in (whole, short):
        code, out, err = reconcile(sink_path, "--json")
        assert code == 3, out + err
        report = json.loads(out)
        assert (report["ok"], report["verdict"], report["judged"]) == (
            False,
            "nothing_compared",
            0,
        )
        assert report["records"]["matched"] == 0
        assert report["windows_by_status"]["complete"] == 0
        assert {w["status"] for w in report["windows"]} == {"empty"}
        assert report["pending"]["records"] == 2 * PARTITIONS
        assert report["pending"]["partitions"] == PARTITIONS
        assert report["pending"]["verdict_at"] == _iso(compared_from_ms)
        code, out, err = reconcile(sink_path)
        assert code == 3, out + err
        assert (
            f"pending: {2 * PARTITIONS} records in windows still open, on {PARTITIONS} "
            f"partitions: compared from {_iso(compared_from_ms)} (in "
        ) in out
        assert out.splitlines()[-1].endswith(
            f"0 records judged, {2 * PARTITIONS} pending until {_iso(compared_from_ms)}: "
            "not a pass; reconcile again then"
        )
        assert _now_ms() < compared_from_ms, "the scenario outran its window"
    # At the moment named, the same records are compared: all there, or one file short.
    config = {
        "kafka.bootstrap_servers": broker.bootstrap_servers,
        "kafka.topic": topic,
        "signing_key_file": str(key_file),
    }
    at_verdict: dict[Path, Reconciliation] = {
        sink_path: Reconciler(
            spark,
            load(overrides={**config, "sink.path": str(sink_path)}),
            key_file.read_text(),
            clock_ms=lambda: compared_from_ms,
        ).run()
        for sink_path in (whole, short)
    }
    assert (at_verdict[whole].exit_code, at_verdict[whole].judged()) == (0, 2 * PARTITIONS)
    assert at_verdict[whole].records()[RecordResult.MATCHED] == 2 * PARTITIONS
    assert at_verdict[whole].pending_records == 0
    assert at_verdict[short].exit_code == 1
    assert at_verdict[short].records()[RecordResult.MISSING] >= 1


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")

"""Spark's own Kafka connector as the sink's and reconcile's source (``sink.source:
kafka``): the same judge and tables behind it as behind ``sla_kafka``.

On the embedded broker (Tansu answers what the connector's Java client asks:
ApiVersions, Metadata, ListOffsets, Fetch) and on Apache Kafka's cluster. The shared
session carries the connector's jars (tests/spark/conftest.py). The mapping of the
probe's TLS and SASL settings is checked option by option in tests/test_kafka_settings.py;
here SASL end to end on a cluster that requires it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from click.testing import CliRunner
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as AdminTopic
from pyspark.sql import SparkSession

import probe.submit
from probe.apache_kafka.cluster import KafkaCluster
from probe.cli import main
from probe.config import load
from probe.core.errors import ConfigError
from probe.core.judge import Outcome
from probe.embedded import EmbeddedBroker, free_loopback_port
from probe.reconcile.job import ReconcileJob, ReconcileSettings
from probe.reconcile.outcome import WindowStatus
from probe.reconcile.windows import WindowSpec
from probe.spark.checksum import RecordFormat
from probe.spark.kafka_connector import batch_options, stream_options
from probe.spark.session import connector_conf
from probe.spark_kafka.jars import ENV, jar_paths, package_coordinate, session_jars
from probe.transport.kafka_settings import librdkafka_security
from tests.conftest import (
    SLA_PROBE,
    KafkaBrokers,
    RunningProbe,
    http_status,
    run_args,
    until,
    wait_for,
)
from tests.spark.cluster import SparkCluster
from tests.spark.test_sink import pipeline
from tests.spark.test_sink_service import _sink_delivered

ROUNDS = 2

# --- the query's and the read's options ---------------------------------------------


def test_the_sink_reads_from_its_pinned_offsets_and_keeps_data_loss_the_judges() -> None:
    options = stream_options("k:9092", "t", '{"1": 5, "0": 3}', 10_000, {})
    assert options["startingOffsets"] == '{"t": {"0": 3, "1": 5}}'
    assert options["subscribe"] == "t"
    assert options["maxOffsetsPerTrigger"] == "10000"
    assert options["failOnDataLoss"] == "false"
    assert options["kafka.allow.auto.create.topics"] == "false"
    assert "maxOffsetsPerTrigger" not in stream_options("k:9092", "t", "latest", None, {})


def test_reconcile_reads_exactly_the_planned_ranges() -> None:
    options = batch_options(
        "k:9092", "t", {"2": 10, "0": 0}, {"2": 20, "0": 5}, min_partitions=2, kafka_options={}
    )
    assert json.loads(options["assign"]) == {"t": [0, 2]}
    assert json.loads(options["startingOffsets"]) == {"t": {"2": 10, "0": 0}}
    assert json.loads(options["endingOffsets"]) == {"t": {"2": 20, "0": 5}}


# --- the jars --------------------------------------------------------------------------


def test_the_session_gets_the_cached_jars_after_the_users_own() -> None:
    cached = jar_paths()
    assert cached is not None, "run `make spark-kafka`"
    added = connector_conf("kafka", {}, {"spark.jars": "/opt/mine.jar"}, own_jvm=True)
    assert added["spark.jars"].split(",") == ["/opt/mine.jar", *map(str, cached)]
    # The secrets the connector is given are redacted wherever Spark prints options.
    assert "jaas" in added["spark.sql.redaction.options.regex"]
    assert connector_conf("sla_kafka", {}, {}, own_jvm=True) == {}


def test_a_connector_asked_for_in_spark_settings_is_left_to_spark() -> None:
    packages = {"spark.jars.packages": package_coordinate()}
    assert session_jars(packages, own_jvm=True) == []
    assert session_jars(packages, own_jvm=False) == []


def test_under_spark_submit_without_the_connector_it_says_what_to_pass() -> None:
    with pytest.raises(ConfigError) as refused:
        session_jars({}, own_jvm=False)
    assert refused.value.field == "sink.source"
    assert "--jars $(python -m probe.spark_kafka jars)" in str(refused.value)
    assert f"--packages {package_coordinate()}" in str(refused.value)


@pytest.mark.parametrize(
    "command",
    [
        ["once", "--embedded", "--stages", "consumer,sink"],
        ["sink", "--bootstrap-servers", "127.0.0.1:9", "--sink-path", "{tmp}/sink"],
        ["reconcile", "--bootstrap-servers", "127.0.0.1:9", "--table", "{tmp}"],
    ],
    ids=["once", "sink", "reconcile"],
)
def test_missing_jars_exit_2_in_one_line_before_anything_starts(
    command: list[str], tmp_path: Path, key_file: Path
) -> None:
    args = [part.replace("{tmp}", str(tmp_path)) for part in command]
    started = time.monotonic()
    done = subprocess.run(
        [SLA_PROBE, *args, "--signing-key-file", str(key_file), "--sink-source", "kafka"],
        capture_output=True,
        text=True,
        env={**_env(), ENV: str(tmp_path / "no-jars")},
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"sla-probe: config error: sink.source: kafka: Spark's Kafka connector jars are not "
        f"in {tmp_path / 'no-jars'}: run `make spark-kafka` (python -m probe.spark_kafka "
        f"install), or set sink.spark_conf spark.jars.packages: {package_coordinate()}"
    ]
    assert time.monotonic() - started < 20  # no broker, no Spark started


@pytest.mark.parametrize("how", ["flag", "env", "yaml"])
def test_a_bad_source_exits_2_naming_the_setting(how: str, tmp_path: Path) -> None:
    config = tmp_path / "probe.yaml"
    config.write_text(yaml.safe_dump({"sink": {"source": "spark"}} if how == "yaml" else {}))
    args = [SLA_PROBE, "once", "--embedded", "--config", str(config)]
    env = _env()
    if how == "flag":
        args += ["--sink-source", "spark"]
    elif how == "env":
        env["SLA_PROBE_SINK_SOURCE"] = "spark"
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "sla-probe: config error: sink.source: Input should be 'sla_kafka' or 'kafka'"
    ]


def _env() -> dict[str, str]:
    import os  # noqa: PLC0415 - only these tests read it

    return {k: v for k, v in os.environ.items() if not k.startswith("SLA_PROBE_")}


# --- the sink and reconcile, reading with the connector ----------------------------


async def _judged_through_the_connector(
    spark: SparkSession, brokers: KafkaBrokers, topic: str, sink_path: Path
) -> tuple[int, str]:
    """Rounds of canaries through the sink reading with the connector; every one
    judged delivered, once. Returns the canaries and the key ring (JSON)."""
    async with pipeline(spark, brokers, topic, sink_path, source="kafka") as p:
        partitions = len(p.probe.partitions)
        for _ in range(ROUNDS):
            await p.probe.produce_round()
        canaries = ROUNDS * partitions
        await until(lambda: p.sink_fates() >= canaries, within=180, what="every sink verdict")
        assert p.sink_outcomes() == {Outcome.DELIVERED.value: canaries}
        query = p.job.query
        assert query is not None
        await until(lambda: query.lastProgress is not None, within=30, what="a progress")
        assert query.lastProgress.sources[0].description.startswith("KafkaV2")
        # The same tables as behind sla_kafka: one row per canary, its coordinates.
        table = spark.read.parquet(p.settings.table("canaries")).collect()
        assert sorted((r.partition, r.seq) for r in table) == [
            (partition, seq) for partition in range(partitions) for seq in range(ROUNDS)
        ]
        assert all(r.kafka_partition == r.partition for r in table)
        assert (
            not (sink_path / "quarantine").exists()
            or not spark.read.parquet(p.settings.table("quarantine")).count()
        )
        return canaries, p.keyring.to_json()


def _reconcile(
    brokers: KafkaBrokers, topic: str, sink_path: Path, keyring_json: str, source: str
) -> dict[str, object]:
    key_file = sink_path.parent / "keys.json"
    key_file.write_text(keyring_json)
    result = CliRunner().invoke(
        main,
        [
            "reconcile", "--bootstrap-servers", brokers.bootstrap_servers,
            "--topic", topic, "--sink-path", str(sink_path),
            "--signing-key-file", str(key_file), "--window-offsets", "100",
            "--settle", "1s", "--sink-source", source, "--json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.stdout + result.stderr
    report: dict[str, object] = json.loads(result.stdout)
    return report


async def _settled() -> None:
    newest_ms = time.time_ns() // 1_000_000
    wait_for(
        lambda: time.time_ns() // 1_000_000 > newest_ms + 1100,
        timeout=5,
        what="every record older than the settle delay",
    )


async def test_the_sink_judges_canaries_read_by_the_connector_on_the_embedded_broker(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    sink_path = tmp_path / "sink"
    canaries, keyring_json = await _judged_through_the_connector(spark, broker, topic, sink_path)
    await _settled()
    # Reconcile with either source: the same verdict on the same records.
    reports = {
        source: _reconcile(broker, topic, sink_path, keyring_json, source)
        for source in ("kafka", "sla_kafka")
    }
    for report in reports.values():
        assert report["ok"] is True
        assert report["records"]["matched"] == canaries  # type: ignore[index]
        assert report["discrepancies"] == 0
    assert reports["kafka"]["windows"] == reports["sla_kafka"]["windows"]


async def test_the_sink_and_reconcile_read_apache_kafka_with_the_connector(
    spark: SparkSession, kafka_cluster: KafkaCluster, topic: str, tmp_path: Path
) -> None:
    sink_path = tmp_path / "sink"
    canaries, keyring_json = await _judged_through_the_connector(
        spark, kafka_cluster, topic, sink_path
    )
    await _settled()
    report = _reconcile(kafka_cluster, topic, sink_path, keyring_json, "kafka")
    assert report["ok"] is True
    assert report["records"]["matched"] == canaries  # type: ignore[index]


# --- reconcile: each discrepancy, read with the connector -----------------------------

RAW = pa.schema(
    [("kafka_partition", pa.int32()), ("kafka_offset", pa.int64()), ("value", pa.binary())]
)


async def _create(brokers: KafkaBrokers, topic: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=brokers.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


def _produce(brokers: KafkaBrokers, topic: str, per_partition: dict[int, int]) -> None:
    """One record per produce request: the embedded broker lists a partition's end
    right only after a batch of one record."""
    producer = Producer({"bootstrap.servers": brokers.bootstrap_servers, "linger.ms": 0})
    for partition, count in per_partition.items():
        for offset in range(count):
            producer.produce(topic, f"r-{partition}-{offset}".encode(), partition=partition)
            assert producer.flush(10) == 0


@pytest.fixture
def raw_topic_and_table(broker: EmbeddedBroker, topic: str, tmp_path: Path) -> tuple[str, str]:
    """12 records on partition 0, 10 on 1 and 2; a table missing two of partition 1,
    one of partition 2 altered, one of partition 0 written twice."""
    import asyncio  # noqa: PLC0415

    asyncio.run(_create(broker, topic, 3))
    _produce(broker, topic, {0: 12, 1: 10, 2: 10})
    rows = {
        (p, o): {"kafka_partition": p, "kafka_offset": o, "value": f"r-{p}-{o}".encode()}
        for p, count in {0: 12, 1: 10, 2: 10}.items()
        for o in range(count)
    }
    del rows[(1, 3)], rows[(1, 8)]
    rows[(2, 4)] = {**rows[(2, 4)], "value": b"r-2-4 but changed"}
    table = tmp_path / "table"
    table.mkdir()
    pq.write_table(
        pa.Table.from_pylist([*rows.values(), rows[(0, 7)]], schema=RAW),
        table / "part-00000.parquet",
    )
    return topic, str(table)


def test_reconcile_counts_each_discrepancy_alike_with_either_source(
    spark: SparkSession, broker: EmbeddedBroker, raw_topic_and_table: tuple[str, str]
) -> None:
    topic, table = raw_topic_and_table

    def run(source: str) -> list[tuple[object, ...]]:
        settings = ReconcileSettings(
            bootstrap_servers=broker.bootstrap_servers,
            topic=topic,
            table=table,
            window=WindowSpec(offsets=10),
            settle_s=1.0,
            lookback_s=None,
            record_format=RecordFormat.RAW,
            sample_size=3,
            source=source,
        )
        result = ReconcileJob(spark, settings, lambda: int(time.time() * 1000) + 10_000).run(
            f"run-{source}"
        )
        assert result.exit_code == 1
        return [(r.window.partition, r.window.start, r.status, r.tally) for r in result.windows]

    connector = run("kafka")
    assert connector == run("sla_kafka")
    by_window = {(p, start): (status, tally) for p, start, status, tally in connector}
    status, tally = by_window[(1, 0)]
    assert (status, tally.missing, tally.samples.missing) == (WindowStatus.MISMATCH, 2, (3, 8))
    _, tally = by_window[(2, 0)]
    assert (tally.mismatched, tally.samples.mismatched) == (1, (4,))
    _, tally = by_window[(0, 0)]
    assert (tally.duplicated, tally.samples.duplicated) == (1, (7,))
    assert by_window[(0, 10)][0] is WindowStatus.COMPLETE


# --- SASL end to end: a cluster that requires it ---------------------------------------

USERS = {"probe": "probe-secret"}


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """One Apache Kafka broker whose clients must log in with SASL/PLAIN."""
    workdir = tmp_path_factory.mktemp("kafka-sasl")
    with KafkaCluster(1, workdir=workdir, plain_users=USERS) as cluster:
        yield cluster


def _sasl_read(
    spark: SparkSession, cluster: KafkaCluster, topic: str, password: str
) -> list[tuple[int, int, bytes]]:
    config = load(
        overrides={
            "kafka.bootstrap_servers": cluster.bootstrap_servers,
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.username": "probe",
            "kafka.sasl.password": password,
        }
    )
    options = batch_options(
        cluster.bootstrap_servers,
        topic,
        {"0": 0},
        {"0": 3},
        min_partitions=1,
        kafka_options=librdkafka_security(config.kafka),
    )
    # A wrong password is refused at once, not retried for the client's minute.
    options["kafka.request.timeout.ms"] = "10000"
    options["kafka.default.api.timeout.ms"] = "15000"
    reader = spark.read.format("kafka")
    for name, value in options.items():
        reader = reader.option(name, value)
    rows = reader.load().select("partition", "offset", "value").collect()
    return sorted((r.partition, r.offset, bytes(r.value)) for r in rows)


def test_the_connector_logs_in_with_the_probes_sasl_settings(
    spark: SparkSession, sasl_broker: KafkaCluster, topic: str
) -> None:
    client = {
        "bootstrap.servers": sasl_broker.bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "probe",
        "sasl.password": USERS["probe"],
    }
    admin = AdminClient(client)
    admin.create_topics([AdminTopic(topic, 1, 1)])[topic].result(60)
    producer = Producer({**client, "linger.ms": 0})
    for offset in range(3):
        producer.produce(topic, f"r-0-{offset}".encode(), partition=0)
    assert producer.flush(30) == 0
    assert _sasl_read(spark, sasl_broker, topic, USERS["probe"]) == [
        (0, offset, f"r-0-{offset}".encode()) for offset in range(3)
    ]
    with pytest.raises(Exception, match=r"SaslAuthenticationException|Authentication failed"):
        _sasl_read(spark, sasl_broker, topic, "wrong")


# --- under spark-submit ------------------------------------------------------------------

SPARK_SUBMIT = str(Path(sys.executable).with_name("spark-submit"))
CLUSTER_UP = 420.0  # a cold cluster: an executor, then its Python workers


def _sink_config(path: Path, brokers: KafkaBrokers, topic: str, sink_path: Path) -> int:
    """A `sla-probe sink` config reading with the connector; returns its metrics port."""
    port = free_loopback_port()
    path.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": brokers.bootstrap_servers, "topic": topic},
                "sink": {"master": None, "path": str(sink_path), "source": "kafka"},
                "metrics": {"host": "127.0.0.1", "port": port},
            }
        )
    )
    return port


def test_under_spark_submit_without_the_jars_the_sink_exits_2_saying_so(
    broker: EmbeddedBroker, topic: str, key_file: Path, tmp_path: Path
) -> None:
    config = tmp_path / "sink.yaml"
    _sink_config(config, broker, topic, tmp_path / "sink")
    done = subprocess.run(
        [SPARK_SUBMIT, "--master", "local[1]", probe.submit.__file__,
         "--config", str(config), "--signing-key-file", str(key_file)],
        capture_output=True, text=True, timeout=180, check=False,
        env={**_env(), "PYSPARK_DRIVER_PYTHON": sys.executable},
    )  # fmt: skip
    # spark-submit passes the Python driver's stderr on through its stdout.
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert (
        "sla-probe: config error: sink.source: kafka: Spark's Kafka connector is not on "
        "spark-submit's classpath: pass --jars $(python -m probe.spark_kafka jars)"
    ) in output


def test_on_a_standalone_cluster_the_executors_read_with_the_jars_spark_submit_was_given(  # noqa: PLR0917 - fixtures
    spark_cluster: SparkCluster,
    broker: EmbeddedBroker,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
    tmp_path: Path,
) -> None:
    """docs/spark-sink.md, "On a Spark cluster", with sink.source: kafka: the connector's
    jars on spark-submit's command line reach the driver and the cluster's executor."""
    producer = start_probe(*run_args(broker.bootstrap_servers, topic, key_file))
    config = tmp_path / "sink.yaml"
    port = _sink_config(config, broker, topic, tmp_path / "sink")
    jars = jar_paths()
    assert jars is not None, "run `make spark-kafka`"
    log = tmp_path / "spark-submit.log"
    python = sys.executable
    sink = subprocess.Popen(
        [SPARK_SUBMIT, "--master", spark_cluster.master_url,
         "--driver-java-options", "-Xss4m",
         "--conf", f"spark.pyspark.python={python}",
         "--jars", ",".join(map(str, jars)),
         probe.submit.__file__,
         "--config", str(config), "--signing-key-file", str(key_file)],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
        env={**_env(), "PYSPARK_DRIVER_PYTHON": python},
    )  # fmt: skip
    try:
        wait_for(
            lambda: sink.poll() is not None or _sink_delivered(port) >= 3,
            timeout=CLUSTER_UP,
            what="canaries delivered by the sink on the cluster",
        )
        assert sink.poll() is None, log.read_text()[-3000:]
        assert http_status(port, "/readyz") == 200
        assert spark_cluster.executors()  # the reads ran on the cluster's executor
    finally:
        producer.stop(timeout=30)
        if sink.poll() is None:
            sink.send_signal(signal.SIGTERM)
            try:
                sink.wait(60)
            except subprocess.TimeoutExpired:
                sink.kill()
                sink.wait()

"""The sink stage as a long-running service: inside `sla-probe run`, and on its own as
`sla-probe sink` under spark-submit (the way a Spark cluster runs it)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

import probe.submit
from probe.config import load
from probe.core.keys import generate_key_ring
from probe.embedded import EmbeddedBroker, free_loopback_port
from probe.services.sink import serve_sink
from tests.certificates import CertificateAuthority
from tests.conftest import (
    SLA_PROBE,
    RunningProbe,
    http_status,
    run_args,
    sample,
    scrape,
    until,
    wait_for,
)

SPARK_SUBMIT = str(Path(sys.executable).with_name("spark-submit"))
# Spark's start-up, the query's positioning batch and the Python workers' start.
SINK_UP = 180.0
# sink.latency_threshold (5 s by default) has a bucket: the rules read the sink's SLI there.
SINK_THRESHOLD_BUCKET = (
    "synthetic_sla_e2e_latency_seconds_bucket",
    (("le", "5.0"), ("stage", "sink"), ("target", "kafka")),
)


def _sink_delivered(port: int) -> float:
    return sample(scrape(port), "synthetic_sla_canaries_total", stage="sink", outcome="delivered")


def _batches(port: int) -> float:
    return sample(scrape(port), "synthetic_sla_spark_batch_duration_seconds_count")


def test_run_with_the_sink_stage_measures_holds_resumes_and_stops_mid_batch(
    broker: EmbeddedBroker,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
    tmp_path: Path,
) -> None:
    """One `run --stages consumer,sink` (a Spark start costs most of a minute) taken
    through what an operator does to it: it measures both stages; SIGUSR1 holds the
    sink and SIGUSR2 resumes it (the drill); SIGTERM to its whole process group while
    a batch runs (a supervisor that signals the group) ends it cleanly."""
    sink_path = tmp_path / "sink"
    running = start_probe(
        *run_args(broker.bootstrap_servers, topic, key_file),
        "--stages", "consumer,sink", "--sink-path", str(sink_path), own_group=True,
    )  # fmt: skip
    wait_for(
        lambda: running.process.poll() is not None or _sink_delivered(running.port) >= 3,
        timeout=SINK_UP,
        what="canaries delivered in the sink stage",
    )
    assert running.process.poll() is None, running.log.read_text()[-3000:]
    _measures_both_stages(running, sink_path)
    _holds_and_resumes(running)
    _stops_mid_batch_cleanly(running, sink_path)


def _measures_both_stages(running: RunningProbe, sink_path: Path) -> None:
    samples = scrape(running.port)
    assert sample(samples, "synthetic_sla_canaries_total", stage="consumer", outcome="delivered")
    # The sink's latency SLI is read at its own threshold: a bucket sits there.
    assert SINK_THRESHOLD_BUCKET in samples
    assert sample(samples, "synthetic_sla_invalid_total", stage="sink") == 0
    assert http_status(running.port, "/readyz") == 200
    # What the counters say landed is in the table, under the probe's own id.
    landed = pq.read_table(sink_path / "canaries").column("probe_id").to_pylist()
    assert landed.count("probe-under-test") >= 3


def _sink_staleness(port: int) -> float:
    """The stalest partition of the sink stage, in seconds."""
    return max(
        (
            value
            for (name, labels), value in scrape(port).items()
            if name == "synthetic_sla_partition_staleness_seconds" and ("stage", "sink") in labels
        ),
        default=0.0,
    )


def _holds_and_resumes(running: RunningProbe) -> None:
    """The operator's drill hook (the sink-stall game day uses it): while held, the
    sink commits nothing and its staleness rises, the consumer stage goes on
    delivering; resumed, the sink catches up on what it held."""
    healthy = 10.0  # seconds: a 2 s trigger and a batch keep staleness well under it

    running.process.send_signal(signal.SIGUSR1)
    # A batch already writing when the signal came may still commit; then nothing does.
    wait_for(
        lambda: _sink_staleness(running.port) > healthy,
        timeout=60,
        what="sink staleness rising while held",
    )
    sink_held = running.canaries("delivered", stage="sink") + running.canaries("late", "sink")
    stale_at_hold = _sink_staleness(running.port)
    consumer_at_hold = running.canaries("delivered")
    # Five rounds of canaries on every partition, a second apart.
    wait_for(
        lambda: running.canaries("delivered") >= consumer_at_hold + 15,
        timeout=30,
        what="the consumer stage delivering while the sink is held",
    )
    judged = running.canaries("delivered", stage="sink") + running.canaries("late", "sink")
    assert judged == sink_held, "the held sink committed a batch"
    assert _sink_staleness(running.port) > stale_at_hold + 3
    assert http_status(running.port, "/healthz") == 200

    running.process.send_signal(signal.SIGUSR2)
    wait_for(
        lambda: _sink_staleness(running.port) < healthy,
        timeout=60,
        what="the sink fresh again after resuming",
    )
    caught_up = running.canaries("delivered", stage="sink") + running.canaries("late", "sink")
    assert caught_up >= sink_held + 15, "the held canaries were not committed on resuming"
    assert running.process.poll() is None, running.log.read_text()[-3000:]


def test_the_standalone_sink_runs_under_spark_submit(
    broker: EmbeddedBroker,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
    tmp_path: Path,
) -> None:
    """`run` produces with its consumer stage only; `sla-probe sink` under spark-submit,
    with ``sink.master: null`` so spark-submit's master is used, judges the same topic."""
    producer = start_probe(*run_args(broker.bootstrap_servers, topic, key_file))
    wait_for(lambda: producer.canaries("delivered") >= 1, timeout=30, what="canaries produced")
    port = free_loopback_port()
    config = tmp_path / "sink.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": broker.bootstrap_servers, "topic": topic},
                "sink": {"master": None, "path": str(tmp_path / "sink")},
                "metrics": {"host": "127.0.0.1", "port": port},
            }
        )
    )
    log = tmp_path / "spark-submit.log"
    # spark-submit starts the driver with PYSPARK_PYTHON: this interpreter, with `probe`.
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    sink = subprocess.Popen(
        [SPARK_SUBMIT, "--master", "local[2]", probe.submit.__file__,
         "--config", str(config), "--signing-key-file", str(key_file)],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    try:
        wait_for(
            lambda: sink.poll() is not None or _sink_delivered(port) >= 3,
            timeout=SINK_UP,
            what="canaries delivered in the standalone sink",
        )
        assert sink.poll() is None, log.read_text()[-3000:]
        assert http_status(port, "/readyz") == 200
        # The standalone sink serves the sink's metrics only, with the Spark health
        # (Spark posts a batch's progress to the listener after the batch).
        wait_for(lambda: _batches(port) > 0, timeout=30, what="batch durations observed")
        samples = scrape(port)
        assert sample(samples, "synthetic_sla_canaries_total", stage="consumer") == 0
        assert SINK_THRESHOLD_BUCKET in samples
        sink.send_signal(signal.SIGTERM)
        # spark-submit hands the signal to the JVM alone; the Python driver sees its
        # JVM go and exits too, instead of serving a green /healthz for a dead sink.
        assert sink.wait(60) in (0, 128 + signal.SIGTERM), log.read_text()[-3000:]
        wait_for(lambda: http_status(port, "/healthz") == 0, timeout=30, what="driver gone")
        # Its reason reaches spark-submit's stderr although the JVM it went through is gone.
        wait_for(
            lambda: "sla-probe: sink stage ended: Spark's JVM is gone" in log.read_text(),
            timeout=30,
            what="the driver's reason line",
        )
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()


async def test_the_standalone_sink_ends_when_its_query_does(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """A sink whose query is gone must not serve a green /healthz forever: it ends,
    saying why, so whatever runs it restarts it from its checkpoint. (The topic does
    not exist yet: the sink starts anyway and waits for it.)"""
    port = free_loopback_port()
    config = load(
        overrides={
            "kafka.bootstrap_servers": broker.bootstrap_servers,
            "kafka.topic": topic,
            "sink.path": str(tmp_path / "sink"),
            "sink.master": "local[2]",  # the tests' session: getOrCreate returns it
            "metrics.host": "127.0.0.1",
            "metrics.port": port,
        }
    )
    serving = asyncio.create_task(serve_sink(config, generate_key_ring(), asyncio.Event()))

    def started() -> bool:
        return serving.done() or any(q.name == "synthetic_sla_sink" for q in spark.streams.active)

    await until(started, SINK_UP, "the standalone sink's query started", every=0.2)
    # No canary, no batch: not ready, and saying why (asked from a thread: the sink
    # serves on this event loop).
    assert await asyncio.to_thread(http_status, port, "/readyz") == 503
    (query,) = [q for q in spark.streams.active if q.name == "synthetic_sla_sink"]
    await asyncio.to_thread(query.stop)
    ended = await asyncio.wait_for(serving, 30)
    assert ended is not None
    assert (ended.reason, ended.detail) == ("stopped", "sink query stopped")
    assert http_status(port, "/healthz") == 0  # its server is closed


async def test_a_sink_that_cannot_connect_ends_saying_why(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """kafka.tls towards a plaintext listener: the sink's reader on the driver says
    only "broker transport failure"; the sink ends naming the cause and the setting,
    as the consumer stage would (and `run`'s /readyz shows it while it restarts)."""
    (tmp_path / "ca.crt").write_text(CertificateAuthority("a CA").pem)
    config = load(
        overrides={
            "kafka.bootstrap_servers": broker.bootstrap_servers,
            "kafka.topic": topic,
            "kafka.send_timeout": "3s",
            "kafka.tls.ca_file": str(tmp_path / "ca.crt"),
            "sink.path": str(tmp_path / "sink"),
            "sink.master": "local[2]",  # the tests' session: getOrCreate returns it
            "metrics.host": "127.0.0.1",
            "metrics.port": free_loopback_port(),
        }
    )
    ended = await asyncio.wait_for(serve_sink(config, generate_key_ring()), SINK_UP)
    assert ended is not None
    print(ended.detail)
    assert ended.reason == "source"
    assert ended.detail.startswith(
        f"sink query cannot read the topic: cannot connect to {broker.bootstrap_servers}: "
        "the broker did not answer the TLS handshake and answers Kafka requests in plaintext"
    )
    assert "the listener may not need kafka.tls" in ended.detail


# --- A clean stop: no traceback, no py4j error, no INTERNAL_ERROR in Spark's log ------

# What a stop that broke something leaves in the probe's log or in Spark's.
UNCLEAN = (
    "Traceback",
    "py4j",
    "Py4J",
    "Answer from Java side is empty",
    "JVM is gone",
    "INTERNAL_ERROR",
    '"level": "error"',
)
SPARK_UNCLEAN = ("INTERNAL_ERROR", "Exception", " ERROR ")


def _assert_clean(probe_log: Path, spark_log: Path) -> None:
    probe_text, spark_text = probe_log.read_text(), spark_log.read_text()
    found = [mark for mark in UNCLEAN if mark in probe_text]
    assert not found, f"{found} in the probe's log:\n{probe_text[-3000:]}"
    found = [mark for mark in SPARK_UNCLEAN if mark in spark_text]
    assert not found, f"{found} in Spark's log:\n{spark_text[-3000:]}"


def _seconds_since_last_batch(port: int) -> float:
    return sample(scrape(port), "synthetic_sla_spark_seconds_since_last_batch")


def _stops_mid_batch_cleanly(running: RunningProbe, sink_path: Path) -> None:
    """SIGTERM to the probe's process group while a batch runs: the batch is let
    finish, the query stopped, then the session; exit 0 as documented, and neither log
    says anything broke. Spark's JVM, had it been signalled with the group, would have
    stopped under the running query. A batch is caught running by holding it (SIGUSR1)
    before it writes: with canaries every second and a 2 s trigger, a batch that makes
    no progress is one held mid-way."""
    running.process.send_signal(signal.SIGUSR1)
    wait_for(
        lambda: _seconds_since_last_batch(running.port) > 8,
        timeout=60,
        what="a sink batch held while it runs",
    )
    assert running.stop(timeout=60) < 15
    assert running.process.returncode == 0, running.log.read_text()[-3000:]
    _assert_clean(running.log, sink_path / "spark.log")


def test_the_sink_interrupted_with_its_process_group_ends_cleanly(
    broker: EmbeddedBroker,
    topic: str,
    *,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
    tmp_path: Path,
) -> None:
    """`sla-probe sink` in local mode interrupted with its whole process group (Ctrl-C
    at a terminal; SIGTERM to the group is `run`'s test above). Spark's JVM, once
    signalled with it, stopped under the running query (INTERNAL_ERROR in Spark's log,
    py4j errors in the probe's). The probe alone stops the query, then Spark: exit 0
    as documented, clean logs."""
    producer = start_probe(*run_args(broker.bootstrap_servers, topic, key_file))
    wait_for(lambda: producer.canaries("delivered") >= 1, timeout=30, what="canaries produced")
    port = free_loopback_port()
    sink_path = tmp_path / "sink"
    log = tmp_path / "sink.log"
    sink = subprocess.Popen(
        [SLA_PROBE, "sink", "--bootstrap-servers", broker.bootstrap_servers, "--topic", topic,
         "--sink-path", str(sink_path), "--signing-key-file", str(key_file),
         "--metrics-host", "127.0.0.1", "--metrics-port", str(port)],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        wait_for(
            lambda: sink.poll() is not None or (_sink_delivered(port) >= 3 and _batches(port) > 0),
            timeout=SINK_UP,
            what="batches of canaries through the standalone sink",
        )
        assert sink.poll() is None, log.read_text()[-3000:]
        os.killpg(sink.pid, signal.SIGINT)
        assert sink.wait(60) == 0, log.read_text()[-3000:]
    finally:
        if sink.poll() is None:
            os.killpg(sink.pid, signal.SIGKILL)
            sink.wait()
    _assert_clean(log, sink_path / "spark.log")


@pytest.mark.gameday
def test_the_sink_judges_on_through_a_broker_that_restarts_empty(
    key_file: Path, start_probe: Callable[..., RunningProbe], tmp_path: Path
) -> None:
    """The embedded broker keeps its logs in memory: restarted, it comes back empty.
    Three such restarts under `run --stages consumer,sink`: the consumer stage loses
    nothing (the probe re-creates the topic and reads the new logs from their start),
    nothing that only reads the topic creates it (it comes back with the probe's three
    partitions, not the broker's default), and the sink's source starts the new logs
    over and judges the canaries written after the last restart."""
    topic = "data-loss-under-the-sink"
    with EmbeddedBroker() as broker:
        running = start_probe(
            *run_args(broker.bootstrap_servers, topic, key_file),
            "--stages", "consumer,sink",
            "--sink-path", str(tmp_path / "sink"),
        )  # fmt: skip
        wait_for(
            lambda: running.process.poll() is not None or _sink_delivered(running.port) >= 3,
            timeout=SINK_UP,
            what="canaries delivered in the sink stage",
        )
        for restart in range(1, 4):
            broker.stop()
            broker.start()
            _wait_for_rounds(
                running, 3, f"three rounds delivered at the consumer after restart {restart}"
            )
        judged = _sink_delivered(running.port)
        wait_for(
            lambda: _sink_delivered(running.port) >= judged + 3 * 3,
            timeout=SINK_UP,
            what="three rounds judged at the sink after the last restart",
        )
        assert running.canaries("lost") == 0, running.log.read_text()[-3000:]
        assert running.canaries("lost", "sink") == 0
        metadata = AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(
            topic, timeout=10
        )
        assert len(metadata.topics[topic].partitions) == 3
        assert http_status(running.port, "/readyz") == 200
        assert running.stop(timeout=60) < 60


def _wait_for_rounds(running: RunningProbe, rounds: int, what: str) -> None:
    """Until the consumer stage delivered this many more rounds of three canaries."""
    before = running.canaries("delivered")
    wait_for(lambda: running.canaries("delivered") >= before + 3 * rounds, timeout=60, what=what)

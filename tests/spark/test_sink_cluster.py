"""The sink on a real Spark standalone cluster, submitted with the command of
docs/spark-sink.md ("On a Spark cluster")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

import probe.submit
from probe.embedded import EmbeddedBroker, free_loopback_port
from tests.conftest import RunningProbe, http_status, run_args, sample, scrape, wait_for
from tests.spark.cluster import SparkCluster
from tests.spark.test_sink_service import _sink_delivered

SPARK_SUBMIT = str(Path(sys.executable).with_name("spark-submit"))
# A cold cluster starts an executor, then its Python workers: minutes on 2 shared cores.
CLUSTER_UP = 420.0


@pytest.mark.gameday
def test_the_sink_on_a_standalone_cluster_survives_a_lost_executor(  # noqa: PLR0917 - fixtures
    spark_cluster: SparkCluster,
    broker: EmbeddedBroker,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
    tmp_path: Path,
) -> None:
    """docs/spark-sink.md, "On a Spark cluster": `run` produces with its consumer stage;
    the sink is submitted to the cluster, its executor killed mid-run; every canary is judged
    once, none twice, none skipped."""
    producer = start_probe(*run_args(broker.bootstrap_servers, topic, key_file))
    port = free_loopback_port()
    sink_path = tmp_path / "sink"
    config = tmp_path / "sink.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": broker.bootstrap_servers, "topic": topic},
                "sink": {"master": None, "path": str(sink_path), "freshness": "5m"},
                "metrics": {"host": "127.0.0.1", "port": port},
            }
        )
    )
    log = tmp_path / "spark-submit.log"
    # The command of docs/spark-sink.md; this interpreter is "the probe installed on every host".
    python = sys.executable
    submitted = time.monotonic()
    sink = subprocess.Popen(
        [SPARK_SUBMIT, "--master", spark_cluster.master_url,
         "--driver-java-options", "-Xss4m",
         "--conf", f"spark.pyspark.python={python}",
         probe.submit.__file__,
         "--config", str(config), "--signing-key-file", str(key_file)],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
        env={**os.environ, "PYSPARK_DRIVER_PYTHON": python},
    )  # fmt: skip
    try:
        wait_for(
            lambda: sink.poll() is not None or _sink_delivered(port) >= 3,
            timeout=CLUSTER_UP,
            what="canaries delivered by the sink on the cluster",
        )
        assert sink.poll() is None, log.read_text()[-3000:]
        print(f"submit to first verdicts: {time.monotonic() - submitted:.0f}s")
        assert http_status(port, "/readyz") == 200
        assert "runs without -Xss4m" not in log.read_text()  # the driver got its stack

        (executor,) = spark_cluster.executors()
        os.kill(executor, signal.SIGKILL)
        before = _sink_delivered(port)
        wait_for(
            lambda: sink.poll() is not None or _sink_delivered(port) >= before + 9,
            timeout=CLUSTER_UP,
            what="the sink delivering again on a new executor",
        )
        assert sink.poll() is None, log.read_text()[-3000:]
        assert spark_cluster.executors() not in ([], [executor])

        producer.stop(timeout=30)
        judged = producer.canaries("delivered") + producer.canaries("late")
        wait_for(
            lambda: (
                _sink_delivered(port)
                + sample(scrape(port), "synthetic_sla_canaries_total", stage="sink", outcome="late")
                >= judged
            ),
            timeout=120,
            what="the sink judging every canary the consumer stage saw",
        )
        samples = scrape(port)
        sink_counts = {
            labels: value
            for (name, labels), value in samples.items()
            if name == "synthetic_sla_canaries_total" and ("stage", "sink") in labels
        }
        assert {dict(labels)["outcome"] for labels, value in sink_counts.items() if value} <= {
            "delivered",
            "late",
        }
        assert sample(samples, "synthetic_sla_duplicates_total", stage="sink") == 0
    finally:
        if sink.poll() is None:
            sink.send_signal(signal.SIGTERM)
            try:
                sink.wait(60)
            except subprocess.TimeoutExpired:
                sink.kill()
                sink.wait()
    verdicts = pq.read_table(sink_path / "verdicts").to_pandas()
    fates = verdicts[(verdicts["kind"] == "fate") & (verdicts["probe_id"] == "probe-under-test")]
    assert not fates.duplicated(["partition", "incarnation", "seq"]).any()
    for _, seqs in fates.groupby("partition")["seq"]:
        assert sorted(seqs) == list(range(min(seqs), max(seqs) + 1))

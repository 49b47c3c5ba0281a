"""`sla-probe reconcile` on a real Spark standalone cluster, submitted with the
command of docs/reconciliation.md ("On a cluster")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import probe.submit
from probe.core.canary import Canary, encode
from probe.core.keys import generate_key_ring
from probe.embedded import EmbeddedBroker
from probe.spark.tables import TABLE_SCHEMAS
from tests.conftest import wait_for
from tests.spark.cluster import SparkCluster

SPARK_SUBMIT = str(Path(sys.executable).with_name("spark-submit"))
# A cold cluster starts an executor, then its Python workers: minutes on 2 shared cores.
SUBMITTED_RUN = 600.0
PER_PARTITION = 40


def test_reconcile_submitted_to_a_standalone_cluster_names_what_is_missing(
    spark_cluster: SparkCluster, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """Canaries in the topic and their rows in a canaries/ table, written the way the
    sink writes them, one row lost: the driver on spark-submit, the reading, decoding
    and checksums on the cluster's executor."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    ring = generate_key_ring()
    key_file = tmp_path / "keys.json"
    key_file.write_text(ring.to_json())
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    rows = []
    for partition in range(2):
        for seq in range(PER_PARTITION):
            canary = Canary("probe-a", 1, "kafka", partition, seq, time.time_ns())
            producer.produce(topic, encode(canary, ring), partition=partition)
            # One record per batch: the embedded broker lists end offsets right only then.
            assert producer.flush(10) == 0
            rows.append(
                {
                    **{name: getattr(canary, name) for name in (
                        "probe_id", "target", "partition", "incarnation", "seq",
                        "produced_ns", "trace_context")},
                    "judged_ns": canary.produced_ns,
                    "sink_commit_ns": canary.produced_ns,
                    "kafka_partition": partition,
                    "kafka_offset": seq,
                }
            )  # fmt: skip
    lost = rows.pop(PER_PARTITION + 17)  # partition 1, offset 17
    sink_path = tmp_path / "sink"
    (sink_path / "canaries" / "batch_id=0").mkdir(parents=True)
    pq.write_table(
        pa.Table.from_pylist(rows, schema=TABLE_SCHEMAS["canaries"]),
        sink_path / "canaries" / "batch_id=0" / "part-00000.parquet",
    )
    config = tmp_path / "reconcile.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": broker.bootstrap_servers, "topic": topic},
                "sink": {"master": None, "path": str(sink_path)},
                "reconcile": {"window": {"offsets": 25}, "settle": "1s"},
            }
        )
    )
    newest = time.time()
    wait_for(lambda: time.time() > newest + 1.1, timeout=5, what="every record older than 1s")
    log = tmp_path / "spark-submit.log"
    python = sys.executable  # "the probe installed on every host"
    started = time.monotonic()
    # The command of docs/reconciliation.md.
    result = subprocess.run(
        [SPARK_SUBMIT, "--master", spark_cluster.master_url,
         "--conf", f"spark.pyspark.python={python}",
         probe.submit.__file__,
         "reconcile", "--config", str(config), "--signing-key-file", str(key_file),
         "--run-id", "on-the-cluster", "--json"],
        stdout=subprocess.PIPE, stderr=log.open("wb"),
        env={**os.environ, "PYSPARK_DRIVER_PYTHON": python},
        timeout=SUBMITTED_RUN, check=False,
    )  # fmt: skip
    print(f"submit to result: {time.monotonic() - started:.0f}s")
    assert result.returncode == 1, log.read_text()[-3000:]
    # spark-submit hands on the driver's stdout and stderr as one stream: the JSON is
    # the last line (the probe's own log lines, errors only by default, come before).
    report = json.loads(result.stdout.decode().strip().splitlines()[-1])
    assert report["records"]["matched"] == 2 * PER_PARTITION - 1
    assert report["records"]["missing"] == 1
    (bad,) = [w for w in report["windows"] if w["status"] == "mismatch"]
    assert (bad["partition"], bad["start_offset"], bad["end_offset"]) == (1, 0, 25)
    assert bad["samples"]["missing"] == [lost["kafka_offset"]]
    assert [w["status"] for w in report["windows"]].count("complete") == 3
    # The executors did the reading: the worker ran this application's executor.
    assert list(spark_cluster.work_dir.glob("app-*/*/stderr"))
    assert "runs without -Xss4m" not in log.read_text()
    written = ds.dataset(sink_path / "reconciliation", partitioning="hive").to_table()
    assert set(written.column("run_id").to_pylist()) == {"on-the-cluster"}
    assert written.num_rows == 4

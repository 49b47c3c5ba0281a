"""Submit to first verdict, and steady batches against the trigger, of `sla-probe sink`
under spark-submit: on a Spark standalone cluster (one master, one worker started from
the pyspark installation) and on ``local[2]``.

Run: ``python benchmarks/bench_sink_launch.py [--masters cluster,local] [--steady 180]``

A `sla-probe run` with the consumer stage produces a canary per partition every 2 s
on the embedded broker; the sink is submitted with the command of
docs/spark-sink.md ("On a Spark cluster"). Figures, read off the sink's own /metrics:

* submit to first verdict: spark-submit's start to the first canary judged in the sink
  (a cold cluster starts an executor, then its Python workers);
* steady batches: over ``--steady`` seconds after that, the mean batch time (the
  histogram's sum over its count), the share of batches longer than the 2 s trigger,
  and the batches per minute.

Figures only; nothing is asserted but a sink that never judges a canary.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

import probe.submit
from probe.core.keys import generate_key_ring
from probe.embedded import EmbeddedBroker, free_loopback_port
from tests.conftest import http_status, sample, scrape
from tests.spark.cluster import standalone_cluster

SPARK_SUBMIT = str(Path(sys.executable).with_name("spark-submit"))
SLA_PROBE = str(Path(sys.executable).with_name("sla-probe"))
FIRST_VERDICT_WITHIN = 600.0


@contextlib.contextmanager
def _process(
    command: list[str], log: Path, env: dict[str, str]
) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _judged(port: int) -> float:
    samples = scrape(port)
    return sum(
        sample(samples, "synthetic_sla_canaries_total", stage="sink", outcome=outcome)
        for outcome in ("delivered", "late")
    )


def measure(master: str, root: Path, broker: EmbeddedBroker, steady_s: float) -> None:
    keys = root / "keys.json"
    keys.write_text(generate_key_ring().to_json())
    topic = f"bench-launch-{os.getpid()}-{int(time.time())}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLA_PROBE_")}
    producer_port, sink_port = free_loopback_port(), free_loopback_port()
    config = root / "sink.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": broker.bootstrap_servers, "topic": topic},
                "sink": {"master": None, "path": str(root / "sink"), "freshness": "5m"},
                "metrics": {"host": "127.0.0.1", "port": sink_port},
            }
        )
    )
    producing = [
        SLA_PROBE, "run", "--bootstrap-servers", broker.bootstrap_servers, "--topic", topic,
        "--signing-key-file", str(keys), "--interval", "2s", "--create-topic",
        "--metrics-host", "127.0.0.1", "--metrics-port", str(producer_port),
    ]  # fmt: skip
    python = sys.executable
    submit = [
        SPARK_SUBMIT, "--master", master, "--driver-java-options", "-Xss4m",
        "--conf", f"spark.pyspark.python={python}", probe.submit.__file__,
        "--config", str(config), "--signing-key-file", str(keys),
    ]  # fmt: skip
    with _process(producing, root / "run.log", env):
        submitted = time.monotonic()
        with _process(submit, root / "spark-submit.log", {**env, "PYSPARK_DRIVER_PYTHON": python}):
            while http_status(sink_port, "/healthz") != 200 or _judged(sink_port) < 1:
                if time.monotonic() - submitted > FIRST_VERDICT_WITHIN:
                    raise SystemExit(f"{master}: no verdict in {FIRST_VERDICT_WITHIN:g} s")
                time.sleep(0.5)
            first = time.monotonic() - submitted
            before = scrape(sink_port)
            time.sleep(steady_s)
            after = scrape(sink_port)

    def delta(name: str) -> float:
        return sample(after, name) - sample(before, name)

    batches = delta("synthetic_sla_spark_batch_duration_seconds_count")
    mean = delta("synthetic_sla_spark_batch_duration_seconds_sum") / max(batches, 1)
    overruns = delta("synthetic_sla_spark_trigger_overruns_total")
    print(
        f"  {master}: submit to first verdict {first:.0f} s; steady {steady_s:g} s: "
        f"{batches:.0f} batches ({batches / steady_s * 60:.0f}/min), mean {mean:.2f} s "
        f"against a 2 s trigger, {overruns:.0f} overran ({overruns / max(batches, 1):.0%})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--masters", default="cluster,local", help="cluster, local or both")
    parser.add_argument("--steady", type=float, default=180.0, help="seconds of steady state")
    options = parser.parse_args()
    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
        "sla-probe sink under spark-submit, 3 partitions, a canary each per 2 s"
    )
    with (
        tempfile.TemporaryDirectory(prefix="bench-launch-") as tmp,
        EmbeddedBroker(log_file=Path(tmp) / "tansu.log") as broker,
    ):
        for master in options.masters.split(","):
            root = Path(tmp) / master
            root.mkdir()
            if master == "cluster":
                with standalone_cluster(root / "spark") as cluster:
                    measure(cluster.master_url, root, broker, options.steady)
            else:
                measure("local[2]", root, broker, options.steady)


if __name__ == "__main__":
    main()

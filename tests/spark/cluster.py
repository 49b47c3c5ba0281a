"""A Spark standalone cluster of the tests' own: one master, one worker, started from
the pyspark installation (`spark-class`), on loopback, as an operator would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyspark

from probe.embedded import free_loopback_port

SPARK_CLASS = str(Path(sys.executable).with_name("spark-class"))
UP_WITHIN = 120.0


@dataclass(frozen=True)
class SparkCluster:
    master_url: str
    worker_log: Path
    work_dir: Path

    def executors(self) -> list[int]:
        """Pids of the executor JVMs the worker runs."""
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                command = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            ours = str(self.work_dir).encode() in command
            if ours and b"CoarseGrainedExecutorBackend" in command:
                pids.append(int(entry))
        return pids


def _wait_for_line(process: subprocess.Popen[bytes], log: Path, text: str) -> None:
    deadline = time.monotonic() + UP_WITHIN
    while text not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{log.name}: no {text!r}; it ends with: {log.read_text()[-2000:]}")
        time.sleep(0.2)


@contextmanager
def standalone_cluster(root: Path, cores: int = 2, memory: str = "2g") -> Iterator[SparkCluster]:
    port = free_loopback_port()
    url = f"spark://127.0.0.1:{port}"
    work_dir = root / "work"
    work_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_WORKER_DIR": str(work_dir),
        # spark-class looks for Spark with `python3` from PATH unless told: this
        # interpreter's pyspark is the installation meant.
        "SPARK_HOME": os.environ.get("SPARK_HOME", os.path.dirname(pyspark.__file__)),
    }
    master_log, worker_log = root / "master.log", root / "worker.log"
    processes: list[subprocess.Popen[bytes]] = []
    try:
        master = subprocess.Popen(
            [SPARK_CLASS, "org.apache.spark.deploy.master.Master",
             "--host", "127.0.0.1", "--port", str(port), "--webui-port", "0"],
            stdout=master_log.open("wb"), stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip
        processes.append(master)
        _wait_for_line(master, master_log, "I have been elected leader")
        worker = subprocess.Popen(
            [SPARK_CLASS, "org.apache.spark.deploy.worker.Worker",
             "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
             "--webui-port", "0", "--work-dir", str(work_dir), url],
            stdout=worker_log.open("wb"), stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip
        processes.append(worker)
        _wait_for_line(worker, worker_log, "Successfully registered with master")
        yield SparkCluster(url, worker_log, work_dir)
    finally:
        for process in reversed(processes):  # the worker first: it stops its executors
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()

"""A real Prometheus for the tests (Debian's `prometheus`): started on a free loopback
port with a configuration of the test's, queried over its HTTP API. The fixture
``start_prometheus`` (tests/conftest.py) starts one scraping probes with the shipped
rules; ``launch_prometheus`` one of any configuration."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from probe.embedded import free_loopback_port
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parent.parent
PLAIN_RULES = ROOT / "charts" / "prometheus" / "synthetic-sla-probe.rules.yml"


class Prometheus:
    """A real Prometheus server on loopback, queried over its HTTP API."""

    def __init__(self, port: int, process: subprocess.Popen[bytes], log: Path) -> None:
        self.port = port
        self.process = process
        self.log = log

    def _url(self, promql: str) -> str:
        query = urllib.parse.urlencode({"query": promql})
        return f"http://127.0.0.1:{self.port}/api/v1/query?{query}"

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant query's result vector; fails on a query error."""
        try:
            with urllib.request.urlopen(self._url(promql), timeout=5) as reply:
                body = json.load(reply)
        except urllib.error.HTTPError as error:
            pytest.fail(f"query failed: {promql}\n{error.read().decode()}")
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def query_error(self, promql: str) -> str | None:
        """Prometheus's reason for refusing the query, None when it answers."""
        try:
            with urllib.request.urlopen(self._url(promql), timeout=5):
                return None
        except urllib.error.HTTPError as error:
            reason: str = json.loads(error.read())["error"]
            return reason

    def value(self, promql: str) -> float | None:
        """The single sample's value, None while there is none."""
        result = self.query(promql)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False


def launch_prometheus(tmp_path: Path, config: dict[str, Any]) -> Prometheus:
    """A real Prometheus with this configuration, on a free port, once it is ready;
    the caller terminates it."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus is not installed: `make test` installs it (Debian package)"
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    port = free_loopback_port()
    log = tmp_path / "prometheus.log"
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config_file}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    prometheus = Prometheus(port, process, log)
    wait_for(
        lambda: process.poll() is not None or prometheus.ready(),
        timeout=30,
        what="Prometheus ready",
    )
    assert process.poll() is None, log.read_text()
    return prometheus


def scraping_probes(*probe_ports: int) -> dict[str, Any]:
    """Prometheus's configuration for probes on these ports: one job, the one the
    probe-down and probe-absent alerts select, an instance per probe (as a
    ServiceMonitor scrapes the chart's replicas), every second, with the shipped rules.
    The 5m recording rules have data after two scrapes."""
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(PLAIN_RULES)],
        "scrape_configs": [
            {
                "job_name": "synthetic-sla-probe",
                "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in probe_ports]}],
            }
        ],
    }

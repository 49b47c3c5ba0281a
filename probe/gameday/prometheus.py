"""Prometheus and Alertmanager as a game day sees them: the alerts, the recorded series.

``LocalPrometheus`` is a real Prometheus (Debian ``prometheus``) on a loopback port,
scraping the probe as ``job="synthetic-sla-probe"`` (the job the probe-down and
probe-absent alerts select) and loading a rules file, the shipped one by default.
``PrometheusApi`` and ``AlertmanagerApi`` read the active alerts of either, with their
labels and states; ``PrometheusApi.query_range`` reads back the probe's series.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from probe.core.errors import ProbeError
from probe.embedded import LoopbackServer
from probe.gameday.timeline import ObservedAlert

# The job name the probe-down and probe-absent alerts select (see the rules file header).
PROBE_JOB = "synthetic-sla-probe"


class AlertApiError(ProbeError):
    """The alerts or query API did not answer as expected."""


@dataclass(frozen=True)
class RecordedSeries:
    """One series read back with query_range: labels (``__name__`` included), samples."""

    labels: dict[str, str]
    samples: list[tuple[float, float]]

    @property
    def name(self) -> str:
        return self.labels["__name__"]


def _parse_time(text: str | None) -> float | None:
    if not text or text.startswith("0001-01-01"):
        return None
    # Go writes nanoseconds; fromisoformat takes at most microseconds.
    text = text.replace("Z", "+00:00")
    head, dot, rest = text.partition(".")
    if dot:
        digits = "".join(c for c in rest if c.isdigit())
        zone = rest[len(digits) :]
        text = f"{head}.{digits[:6]}{zone}"
    return datetime.fromisoformat(text).timestamp()


class _HttpApi:
    def __init__(self, base_url: str, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        url = self.base_url + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as reply:
                return json.load(reply)
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")[:500]
            raise AlertApiError(f"GET {url}: HTTP {error.code}: {detail}") from None
        except (OSError, ValueError) as error:
            raise AlertApiError(f"GET {url}: {error}") from None


class PrometheusApi(_HttpApi):
    """The HTTP API of a Prometheus server (``/api/v1``)."""

    def active_alerts(self) -> list[ObservedAlert]:
        body = self._get("/api/v1/alerts")
        return [
            ObservedAlert(
                labels=dict(alert["labels"]),
                state=alert["state"],
                active_at=_parse_time(alert.get("activeAt")),
            )
            for alert in body["data"]["alerts"]
            if alert["state"] in ("pending", "firing")
        ]

    def query(self, promql: str) -> list[dict[str, Any]]:
        body = self._get("/api/v1/query", {"query": promql})
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def query_range(
        self, promql: str, start: float, end: float, step: float
    ) -> list[RecordedSeries]:
        body = self._get(
            "/api/v1/query_range",
            {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"},
        )
        return [
            RecordedSeries(
                labels=dict(series["metric"]),
                samples=[(float(at), float(value)) for at, value in series["values"]],
            )
            for series in body["data"]["result"]
        ]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.base_url + "/-/ready", timeout=1) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False


class AlertmanagerApi(_HttpApi):
    """The HTTP API of an Alertmanager (``/api/v2``): firing alerts only, after inhibition.

    Alertmanager never sees pending alerts; an inhibited alert is still reported
    (state ``suppressed``) and counts here as firing: it fired, only the notification
    was held back.
    """

    def active_alerts(self) -> list[ObservedAlert]:
        body = self._get("/api/v2/alerts", {"active": "true", "inhibited": "true"})
        return [
            ObservedAlert(
                labels=dict(alert["labels"]),
                state="firing",
                active_at=_parse_time(alert.get("startsAt")),
            )
            for alert in body
        ]


class LocalPrometheus(LoopbackServer):
    """A real Prometheus scraping the probe (and its sink process) on loopback, with a
    rules file loaded.

    >>> with LocalPrometheus(workdir, probe_port=9464, rules_file=rules) as prometheus:
    ...     prometheus.api.active_alerts()
    []
    """

    name = "prometheus"
    start_timeout = 30.0

    def __init__(
        self,
        workdir: Path,
        *,
        probe_port: int,
        rules_file: Path,
        interval: float,
        other_ports: Sequence[int] = (),
    ) -> None:
        super().__init__(log_file=workdir / "prometheus.log")
        self.workdir = workdir
        self.probe_port = probe_port
        # More processes of the probe's job (a sink in its own process).
        self.other_ports = tuple(other_ports)
        self.rules_file = rules_file
        self.interval = interval
        self.api = PrometheusApi(f"http://127.0.0.1:{self.port}")

    def command(self) -> list[str]:
        binary = shutil.which("prometheus")
        if binary is None:
            raise AlertApiError("prometheus is not installed (Debian package `prometheus`)")
        interval = f"{self.interval * 1000:.0f}ms"
        config = {
            "global": {
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "evaluation_interval": interval,
            },
            "rule_files": [str(self.rules_file)],
            "scrape_configs": [
                {
                    "job_name": PROBE_JOB,
                    "static_configs": [
                        {
                            "targets": [
                                f"127.0.0.1:{port}" for port in (self.probe_port, *self.other_ports)
                            ]
                        }
                    ],
                }
            ],
        }
        config_file = self.workdir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config))
        return [
            binary,
            f"--config.file={config_file}",
            f"--storage.tsdb.path={self.workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]

    def start(self, timeout: float | None = None) -> None:
        super().start(timeout)
        deadline = time.monotonic() + (timeout or self.start_timeout)
        while not self.api.ready():
            if time.monotonic() > deadline:
                self.stop()
                raise AlertApiError("prometheus did not become ready" + self._log_tail())
            time.sleep(0.1)

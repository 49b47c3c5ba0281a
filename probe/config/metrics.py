"""What the probe serves and measures itself against: the ``metrics`` section (the
/metrics endpoint, the latency threshold its histogram buckets sit on, which partition
series to export, the web configuration that secures it and the plain health port
beside it) and the ``slo`` section (the objectives the status page measures the error
budget against).

The web configuration file is read at load, so a bad one exits 2 at start naming its
field, not at the first scrape. The series themselves are defined in probe.metrics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator

from probe.config.base import _Section
from probe.config.durations import HOUR, Duration, _between
from probe.web_config import read_web_config


def _readable_web_config(path: Path | None) -> Path | None:
    if path is not None:
        # Its WebConfigError is a ValueError naming the field inside the file.
        read_web_config(path)
    return path


class MetricsConfig(_Section):
    host: str = "0.0.0.0"
    port: int = Field(default=9464, ge=0, le=65535)
    # The latency SLO threshold: a histogram bucket boundary sits exactly on it.
    latency_threshold: Annotated[Duration, _between(0.001, HOUR)] = 0.5
    # Which partitions get a per-partition staleness series: all, only those stale
    # now (older than interval + freshness), or none. The per-stage aggregates (largest
    # staleness, stale partitions) are always exported; the alerts work in every mode.
    # The partition leader series follow it (stale: the partitions stale or in replica
    # trouble); the replica problem series are there unless it is none.
    partition_series: Literal["all", "stale", "none"] = "all"
    # The exporter toolkit's web configuration (probe.web_config): TLS, client
    # certificates and basic auth on every path served. Read here to fail at start
    # (exit 2) with the file's field named, not at the first scrape.
    web_config_file: Annotated[Path | None, AfterValidator(_readable_web_config)] = None
    # A second port, plain HTTP whatever web_config_file says, serving /healthz and
    # /readyz alone (no reasons, nothing that names a broker or partition): for the
    # kubelet, which has no credentials, when the web config secures the main port.
    # None: no second port (the main port's /healthz and /readyz are always there).
    health_port: int | None = Field(default=None, ge=0, le=65535)

    @field_validator("health_port")
    @classmethod
    def _health_port_of_its_own(cls, health_port: int | None, info: ValidationInfo) -> int | None:
        # Port 0 asks the kernel for a free port, for each listener a different one.
        if health_port and health_port == info.data.get("port"):
            raise ValueError(f"must differ from metrics.port ({health_port})")
        return health_port


class SloConfig(_Section):
    """The objectives the status page (``/``) measures the error budget against: the
    same as the chart's ``slo.availability.objective`` and ``slo.latency.objective``
    (its rules alert on them; the page shows what the probe itself counted)."""

    # Share of canaries delivered (within the stage's freshness) of all fates.
    availability_objective: float = Field(default=0.999, gt=0.0, lt=1.0)
    # Share of arrived canaries faster than the stage's latency threshold
    # (metrics.latency_threshold; the sink's sink.latency_threshold).
    latency_objective: float = Field(default=0.99, gt=0.0, lt=1.0)

"""The series of `sla-probe once`'s push to a Pushgateway: one target's smoke test.

They are built on a registry of the push's own, one a target, never on a served one:
each push replaces its group's last result, so the series hold this run alone (all
gauges but the latency histogram). probe.services.smoke_push fills them from the
run's tally and pushes them.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Gauge, Histogram


class SmokeSeries:
    """One target's result as the series of one push.

    ``latency_buckets``: the probe's, a boundary on every latency threshold
    (:func:`probe.metrics.latency_buckets`), so a pushed result reads like a scraped one.
    """

    def __init__(self, registry: CollectorRegistry, *, latency_buckets: Sequence[float]) -> None:
        self.success = Gauge(
            "synthetic_sla_smoke_success",
            "1 when the last smoke test of this target passed, 0 when it failed.",
            registry=registry,
        )
        self.canaries = Gauge(
            "synthetic_sla_smoke_canaries",
            "Canaries of the last smoke test, by stage and outcome.",
            ["stage", "outcome"],
            registry=registry,
        )
        self.latency = Histogram(
            "synthetic_sla_smoke_latency_seconds",
            "End-to-end latency of the last smoke test's delivered and late canaries.",
            ["stage"],
            buckets=latency_buckets,
            registry=registry,
        )
        self.failing = Gauge(
            "synthetic_sla_smoke_failing_partitions",
            "Partitions (or shards) of the last smoke test with a canary not delivered or "
            "an anomaly.",
            ["stage"],
            registry=registry,
        )
        self.last_run = Gauge(
            "synthetic_sla_smoke_last_run_timestamp_seconds",
            "When the last smoke test of this target ended (Unix time).",
            registry=registry,
        )
        self.duration = Gauge(
            "synthetic_sla_smoke_duration_seconds",
            "How long the last smoke test ran.",
            registry=registry,
        )

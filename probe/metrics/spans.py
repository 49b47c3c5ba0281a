"""Spans the tracer dropped: probe.tracing counts them, this collector exports the
count at scrape time on the probe's registry."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from probe import tracing


class SpanDropCollector(Collector):
    """`synthetic_sla_spans_dropped_total{reason}`: spans that never reached the
    collector (probe.tracing counts them on the exporter's thread), read at scrape time.
    Both reasons exist at zero from the start, exporting or not."""

    def __init__(self, stats: tracing.ExportStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "synthetic_sla_spans_dropped",
            "Spans dropped on their way to the OTLP collector: queue_full (the bounded "
            "export queue had no room) or export_failed (the collector did not take them).",
            labels=["reason"],
        )
        dropped = self._stats.dropped()
        for reason in tracing.DROP_REASONS:
            family.add_metric([reason], float(dropped.get(reason, 0)))
        yield family

"""Staleness: how old the freshest canary each stage has seen on a partition is.

Staleness is not stored: it is computed from the judges at scrape time, so it keeps
rising while a partition is silent even though no event updates it. Per-partition
staleness is one series per partition (10,000 at 10,000 partitions): the
``metrics.partition_series`` setting exports it for every partition, only for those
currently stale, or for none; the per-stage aggregates (the largest staleness, the
number of stale partitions) are always exported, and the rules and dashboard work
from them in every mode.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from probe.core.judge import StreamKey
from probe.metrics.rendered import LinePrefixes, RenderedGauge


class StalenessSource(Protocol):
    """Anything that knows, per stream, how old the freshest canary it has seen is:
    a judge, or the Spark sink's record of what it committed."""

    def staleness_ns(self, now_ns: int) -> dict[StreamKey, int]: ...


@dataclass(frozen=True, slots=True)
class StageSource:
    """A stage whose staleness is exported; a partition is stale past ``stale_after_ns``."""

    target: str
    stage: str
    judge: StalenessSource
    stale_after_ns: int

    def is_stale(self, staleness_ns: int) -> bool:
        return staleness_ns > self.stale_after_ns


class PartitionSeries(StrEnum):
    """Which partitions get a `synthetic_sla_partition_staleness_seconds` series."""

    ALL = "all"
    STALE = "stale"  # only those stale now (it missed a round: see stale_after)
    NONE = "none"


def stale_after(interval: float, freshness: float) -> float:
    """When a partition is stale: its freshest canary is older than one interval plus
    the stage's freshness deadline, so the canary of its last round is overdue (a
    healthy partition peaks at one interval plus its latency).

    >>> stale_after(20.0, 5.0)
    25.0
    """
    return interval + freshness


class StalenessCollector(Collector):
    """Staleness, computed at scrape time: per partition (as ``partition_series`` says),
    and per stage its largest value and the number of stale partitions (always)."""

    def __init__(
        self,
        clock_ns: Callable[[], int] = time.time_ns,
        partition_series: PartitionSeries = PartitionSeries.ALL,
    ) -> None:
        self._sources: list[StageSource] = []
        self._clock_ns = clock_ns
        self._partition_series = partition_series
        self._prefixes = LinePrefixes()

    def add(self, source: StageSource) -> None:
        self._sources.append(source)

    def sources(self) -> list[StageSource]:
        return list(self._sources)

    def stale_partitions(self, target: str) -> set[int]:
        """The target's partitions stale now in at least one of its stages: those that
        have a staleness series in ``stale`` mode."""
        now_ns = self._clock_ns()
        return {
            key.partition
            for source in self._sources
            if source.target == target
            for key, value in source.judge.staleness_ns(now_ns).items()
            if source.is_stale(value)
        }

    def collect(self) -> Iterator[Metric]:
        family = RenderedGauge(
            "synthetic_sla_partition_staleness_seconds",
            "Age of the freshest canary a stage has seen on a partition (now minus its "
            "produce time); rises while the partition is silent or the stage lags. Which "
            "partitions have a series: metrics.partition_series (all, stale, none).",
            labels=["target", "stage", "partition"],
        )
        largest = GaugeMetricFamily(
            "synthetic_sla_staleness_max_seconds",
            "The largest staleness of any partition of the stage (0 with none).",
            labels=["target", "stage"],
        )
        stale = GaugeMetricFamily(
            "synthetic_sla_stale_partitions",
            "Partitions of the stage whose freshest canary is older than one interval plus "
            "the stage's freshness deadline: they missed at least their last round.",
            labels=["target", "stage"],
        )
        now_ns = self._clock_ns()
        prefixes = self._prefixes
        mode = self._partition_series
        for source in self._sources:
            staleness = source.judge.staleness_ns(now_ns)
            largest.add_metric(
                [source.target, source.stage], max(staleness.values(), default=0) / 1e9
            )
            stale.add_metric(
                [source.target, source.stage],
                sum(1 for value in staleness.values() if source.is_stale(value)),
            )
            if mode is PartitionSeries.NONE:
                continue
            for key in sorted(staleness, key=lambda key: key.partition):
                value = staleness[key]
                if mode is PartitionSeries.STALE and not source.is_stale(value):
                    continue
                labels = [source.target, source.stage, str(key.partition)]
                ident = (source.target, source.stage, key.partition)
                prefixes.add(family, ident, labels, value / 1e9)
        prefixes.trim(family.series())  # partitions went away or are fresh again
        yield family
        yield largest
        yield stale

"""A gauge of one value per (target, partition), set whole at each update: the
partitions an update leaves out lose their series, so a partition no longer read (the
topic shrank, re-created smaller) does not stand frozen at its last value."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import Gauge


class PerPartition:
    """``gauge`` has the labels (target, partition)."""

    def __init__(self, gauge: Gauge) -> None:
        self.gauge = gauge
        self._partitions: dict[str, set[str]] = {}

    def set_all(self, target: str, values: Mapping[int, int]) -> None:
        now = {str(partition) for partition in values}
        for gone in self._partitions.get(target, set()) - now:
            self.gauge.remove(target, gone)
        for partition, value in values.items():
            self.gauge.labels(target, str(partition)).set(value)
        self._partitions[target] = now

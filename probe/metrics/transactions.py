"""The transactional stage's own metrics: what the probe's transactional writes go
through, and what its read_committed reader is held back by.

Its canaries are counted like every stage's (``stage="transactional"``); an aborted
canary read there is an anomaly (``synthetic_sla_aborted_reads_total``, with the
others). These say how the probe's transactions ended, how many canaries were written
to be aborted, and, per partition, how far the last stable offset trails the high
watermark: records of transactions still open, which no read_committed consumer of
the partition reads until they end (a hanging transaction pins it).
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from probe.core.errors import TransactionOutcome
from probe.metrics.per_partition import PerPartition


class TransactionMetrics:
    """The transactional stage's series on the probe's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.transactions = Counter(
            "synthetic_sla_transactions",
            "The probe's transactions by how they ended: committed, aborted (its aborted "
            "rounds, on purpose) or failed (their commit or abort failed or took longer "
            "than the send timeout).",
            ["target", "outcome"],
            registry=registry,
        )
        self.aborted_written = Counter(
            "synthetic_sla_aborted_canaries",
            "Canaries written in the aborted rounds' transactions: no stage expects them, "
            "and a stage reading committed records must never read one.",
            ["target"],
            registry=registry,
        )
        self.unstable = Gauge(
            "synthetic_sla_partition_unstable_records",
            "Records between the partition's last stable offset and its high watermark, "
            "as the transactional stage's reader last fetched it: records of transactions "
            "still open, which read_committed consumers wait for.",
            ["target", "partition"],
            registry=registry,
        )
        self._unstable_by_partition = PerPartition(self.unstable)

    def declare(self, target: str) -> None:
        for outcome in TransactionOutcome:
            self.transactions.labels(target, outcome.value)
        self.aborted_written.labels(target)

    def ended(self, target: str, outcome: TransactionOutcome) -> None:
        self.transactions.labels(target, outcome.value).inc()

    def unstable_records(self, target: str, gaps: Mapping[int, int]) -> None:
        """Each partition's gap; a partition no longer read loses its series."""
        self._unstable_by_partition.set_all(target, gaps)

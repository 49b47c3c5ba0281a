"""The mirror stage's own series (docs/mirrors.md): what the mirror stage's reader reads
of MirrorMaker 2 itself on the target cluster, its heartbeats and its checkpoints. Its
canaries are counted like every stage's (``stage="mirror"``)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Gauge

from probe.metrics.per_partition import PerPartition


class MirrorMetrics:
    """The mirror stage's series on the probe's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        # A timestamp, not an age, so that a probe that stopped updating it shows its
        # age growing rather than a frozen value.
        self.heartbeat_at = Gauge(
            "synthetic_sla_mirror_heartbeat_timestamp_seconds",
            "When MirrorMaker 2 last wrote a heartbeat from mirror.source_alias to the "
            "mirror stage's cluster (its heartbeats topic), as MirrorMaker 2 stamped it, "
            "seconds since the epoch; absent until the probe has read one.",
            ["target"],
            registry=registry,
        )
        self.checkpoint_lag = Gauge(
            "synthetic_sla_mirror_checkpoint_lag_records",
            "Records of the mirrored topic on the target cluster past the offset "
            "MirrorMaker 2's newest checkpoint translated the probe's consumer group's "
            "committed offset to (the group stage's group): what a consumer of the group "
            "failing over to the target now would read again; absent without the group "
            "stage, or until a checkpoint is read.",
            ["target", "partition"],
            registry=registry,
        )
        self._lag_by_partition = PerPartition(self.checkpoint_lag)

    def heartbeat(self, target: str, at: float) -> None:
        self.heartbeat_at.labels(target).set(at)

    def checkpoints(self, target: str, lag: Mapping[int, int]) -> None:
        """Each partition's lag; a partition no longer checkpointed loses its series."""
        self._lag_by_partition.set_all(target, lag)

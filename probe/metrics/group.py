"""The group stages' own metrics: what a consumer-group member goes through.

Their canaries are counted like every stage's (``stage="group"`` for the classic
protocol's member, ``stage="group_consumer"`` for the consumer protocol's, KIP-848);
these series, under the same ``stage`` label, say what real consumers of the cluster
live through besides: how long the coordinator takes to
acknowledge a commit and why commits fail, how often and for how long the member
rebalances, which broker coordinates the group, and whether it is stable. Every
series a rule reads exists from the moment the target is declared (a commit-latency
SLI with no commit yet is 0, not "no data").
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from probe.core.errors import CommitFailure

# Rebalances take from a few ms (one member, no initial delay) to the session timeout
# and beyond (a coordinator that moved, members that left without a word).
REBALANCE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# A share group delivers a record again each time a lock runs out or a member releases
# it, until group.share.delivery.count.limit (5 by default, at most 10) archives it.
DELIVERY_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0, 10.0)
# The stage whose member is in a share group (probe.config.StageName.SHARE): the only
# one with delivery counts.
SHARE = "share"


class GroupMetrics:
    """The group stages' series on the probe's registry; ``of(stage)`` is a reader's
    recorder."""

    def __init__(self, registry: CollectorRegistry, *, commit_buckets: Iterable[float]) -> None:
        self.commit_latency = Histogram(
            "synthetic_sla_group_commit_latency_seconds",
            "Time the group coordinator took to acknowledge an offset commit (commits "
            "that succeeded; failed ones are synthetic_sla_group_commit_failures_total).",
            ["target", "stage"],
            buckets=tuple(commit_buckets),
            registry=registry,
        )
        self.commit_failures = Counter(
            "synthetic_sla_group_commit_failures",
            "Offset commits that failed, by reason.",
            ["target", "stage", "reason"],
            registry=registry,
        )
        self.rebalances = Counter(
            "synthetic_sla_group_rebalances",
            "Rebalances (join and sync) the group member went through, the first join included.",
            ["target", "stage"],
            registry=registry,
        )
        self.rebalance_duration = Histogram(
            "synthetic_sla_group_rebalance_seconds",
            "How long each rebalance took, from the partitions' revocation (or the "
            "subscription) to the new assignment.",
            ["target", "stage"],
            buckets=REBALANCE_BUCKETS,
            registry=registry,
        )
        self.stable = Gauge(
            "synthetic_sla_group_stable",
            "1 while the member holds an assignment and no rebalance is in progress.",
            ["target", "stage"],
            registry=registry,
        )
        self.coordinator = Gauge(
            "synthetic_sla_group_coordinator",
            "1 for the broker that coordinates the group stage's consumer group.",
            ["target", "stage", "broker"],
            registry=registry,
        )
        self.first_record = Gauge(
            "synthetic_sla_group_first_record_seconds",
            "Time from the member's last assignment to the first record it read after it.",
            ["target", "stage"],
            registry=registry,
        )
        self.assigned = Gauge(
            "synthetic_sla_group_assigned_partitions",
            "Partitions of the canary topic assigned to the member.",
            ["target", "stage"],
            registry=registry,
        )
        self.redelivered = Counter(
            "synthetic_sla_group_redelivered",
            "Records fetched again after a rebalance because their offsets were not "
            "committed (not judged twice).",
            ["target", "stage"],
            registry=registry,
        )
        self.deliveries = Histogram(
            "synthetic_sla_group_deliveries",
            "The delivery count the broker gave each record the share stage's member "
            "read: 1 the first time; more when its lock ran out at another member, or "
            "the member's acceptance was lost.",
            ["target", "stage"],
            buckets=DELIVERY_BUCKETS,
            registry=registry,
        )
        self.member_errors = Counter(
            "synthetic_sla_group_member_errors",
            "Errors the member's client (librdkafka: the group_consumer and share stages) "
            "reported, by Kafka's or librdkafka's error name: heartbeats refused "
            "(fenced_member_epoch, unknown_member_id), the assignment lost without a "
            "revocation (assignment_lost: the member was fenced), the coordinator or a "
            "broker out of reach (transport, all_brokers_down), fetches refused.",
            ["target", "stage", "error"],
            registry=registry,
        )
        self._coordinators: dict[tuple[str, str], str] = {}

    def declare(self, target: str, stage: str) -> None:
        """Every series a rule reads, at zero."""
        self.commit_latency.labels(target, stage)
        for reason in CommitFailure:
            self.commit_failures.labels(target, stage, reason.value)
        self.rebalances.labels(target, stage)
        self.rebalance_duration.labels(target, stage)
        self.stable.labels(target, stage).set(0)
        self.assigned.labels(target, stage).set(0)
        self.redelivered.labels(target, stage)
        if stage == SHARE:
            self.deliveries.labels(target, stage)

    def of(self, stage: str) -> StageGroupMetrics:
        """The recorder of the reader of ``stage``."""
        return StageGroupMetrics(self, stage)

    def coordinated_by(self, target: str, stage: str, broker: int | None) -> None:
        """The coordinator's broker id; None: unknown (no series)."""
        now = "" if broker is None else str(broker)
        before = self._coordinators.get((target, stage), "")
        if now == before:
            return
        if before:
            self.coordinator.remove(target, stage, before)
        if now:
            self.coordinator.labels(target, stage, now).set(1)
        self._coordinators[(target, stage)] = now


class StageGroupMetrics:
    """One group stage's recorder (probe.transport.kafka_group.GroupRecorder): the
    series of GroupMetrics under its ``stage`` label."""

    def __init__(self, metrics: GroupMetrics, stage: str) -> None:
        self._metrics = metrics
        self._stage = stage

    def committed(self, target: str, seconds: float) -> None:
        self._metrics.commit_latency.labels(target, self._stage).observe(seconds)

    def commit_failed(self, target: str, reason: CommitFailure) -> None:
        self._metrics.commit_failures.labels(target, self._stage, reason.value).inc()

    def rebalanced(self, target: str, seconds: float, partitions: int) -> None:
        self._metrics.rebalances.labels(target, self._stage).inc()
        self._metrics.rebalance_duration.labels(target, self._stage).observe(seconds)
        self._metrics.assigned.labels(target, self._stage).set(partitions)

    def set_stable(self, target: str, stable: bool) -> None:
        self._metrics.stable.labels(target, self._stage).set(1 if stable else 0)

    def coordinated_by(self, target: str, broker: int | None) -> None:
        self._metrics.coordinated_by(target, self._stage, broker)

    def first_record_after(self, target: str, seconds: float) -> None:
        self._metrics.first_record.labels(target, self._stage).set(seconds)

    def refetched(self, target: str, records: int) -> None:
        self._metrics.redelivered.labels(target, self._stage).inc(records)

    def delivered(self, target: str, delivery_count: int) -> None:
        self._metrics.deliveries.labels(target, self._stage).observe(delivery_count)

    def member_error(self, target: str, error: str) -> None:
        self._metrics.member_errors.labels(target, self._stage, error).inc()

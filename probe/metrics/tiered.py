"""The tiered read's series (probe.stages.tiered): reads of canaries old enough to be
served from tiered storage, by outcome, why the failed ones failed, and the time to
each read's first record.

They are not the stages' ``synthetic_sla_canaries_total``: a tiered read judges a
canary every other stage judged long ago, on another path (the broker's remote storage
manager), and its SLI is its own: reads that served (``read``) against reads that
failed (``failed``), and reads whose first record came within ``tiered.threshold``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from probe.core.tiered import TieredOutcome, TieredRead

# Remote stores answer in seconds: buckets up to the longest read timeout's range.
TIERED_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)


class TieredMetrics:
    """The tiered read's series on the probe's registry."""

    def __init__(self, registry: CollectorRegistry, *, threshold: float = 5.0) -> None:
        self.reads = Counter(
            "synthetic_sla_tiered_reads",
            "Tiered reads by outcome: read (a canary written tiered.age ago read back and "
            "verified), failed (the broker answered with an error, or no record came by "
            "tiered.timeout), invalid (a canary of this probe's that fails verification), "
            "no_canary (nothing of this probe's from then: not in the SLI).",
            ["target", "outcome"],
            registry=registry,
        )
        self.failures = Counter(
            "synthetic_sla_tiered_read_failures",
            "Failed tiered reads by reason: the broker's error name (UNKNOWN_SERVER_ERROR is "
            "what a remote storage manager's failure comes back as), or timeout.",
            ["target", "reason"],
            registry=registry,
        )
        self.first_record = Histogram(
            "synthetic_sla_tiered_first_record_seconds",
            "Seconds from a tiered read's timestamp lookup to its first record (reads that "
            "served only): the tiered read's latency SLI, good under tiered.threshold.",
            ["target"],
            buckets=tuple(sorted({*TIERED_BUCKETS, round(threshold, 6)})),
            registry=registry,
        )
        self.canary_age = Gauge(
            "synthetic_sla_tiered_canary_age_seconds",
            "How old the canary the last tiered read served was: what proves the read "
            "reached back past the topic's local retention.",
            ["target"],
            registry=registry,
        )

    def declare(self, target: str) -> None:
        for outcome in TieredOutcome:
            self.reads.labels(target, outcome.value)
        self.first_record.labels(target)

    def count(self, target: str, read: TieredRead) -> None:
        self.reads.labels(target, read.outcome.value).inc()
        if read.outcome is TieredOutcome.FAILED and read.reason is not None:
            self.failures.labels(target, read.reason).inc()
        if read.outcome is TieredOutcome.READ and read.first_record_s is not None:
            self.first_record.labels(target).observe(read.first_record_s)
            if read.canary_age_s is not None:
                self.canary_age.labels(target).set(read.canary_age_s)

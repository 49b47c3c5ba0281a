"""The `once` report: a tally of findings per stage, rendered as a table or JSON.

Beside the counts it names the failing partitions (the worst few) and the broker that
led each when its canaries were produced, so a failed smoke test points somewhere.

A run is ``ok`` when every canary of every stage was delivered and nothing else
happened: no late, lost or failed canary, and no invalid, duplicate, reordered or
resurrected record. A smoke test should be strict; a live SLO tolerates noise, a
deploy gate should not.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from probe.core.errors import RejectReason
from probe.core.judge import Anomaly, AnomalyKind, Fate, Finding, Outcome


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values.

    >>> percentile([1, 2, 3, 4], 50)
    2
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class FailingPartition:
    """What went wrong on one partition (or MQTT shard) at one stage, and the broker
    that led it when its canaries were produced (None: not known, as on MQTT)."""

    partition: int
    broker: int | None = None
    findings: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, object]:
        return {"partition": self.partition, "broker": self.broker, "findings": dict(self.findings)}

    def describe(self) -> str:
        """``2 (broker 1): 3 lost, 1 late``."""
        leader = "" if self.broker is None else f" (broker {self.broker})"
        counts = ", ".join(f"{n} {name}" for name, n in self.findings.most_common())
        return f"{self.partition}{leader}: {counts}"


# The report names this many failing partitions per stage, worst first, and counts the
# rest: a broker down on a topic of 10,000 partitions must not print 10,000 lines.
FAILING_PARTITIONS_LISTED = 20
FAILING_PARTITIONS_IN_TABLE = 5


@dataclass
class StageTally:
    outcomes: Counter[str] = field(default_factory=Counter)
    anomalies: Counter[str] = field(default_factory=Counter)
    invalid: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    # By partition: the canaries not delivered and the anomalies that fail the stage.
    failing: dict[int, FailingPartition] = field(default_factory=dict)

    def note_failing(self, partition: int, finding: str, broker: int | None) -> None:
        entry = self.failing.setdefault(partition, FailingPartition(partition))
        entry.findings[finding] += 1
        if broker is not None:
            entry.broker = broker

    def worst_partitions(self) -> list[FailingPartition]:
        """Failing partitions, most findings first, then by partition number."""
        return sorted(self.failing.values(), key=lambda p: (-p.findings.total(), p.partition))

    @property
    def ok(self) -> bool:
        bad_outcomes = sum(
            n for outcome, n in self.outcomes.items() if outcome != Outcome.DELIVERED
        )
        unexpected = sum(
            n for kind, n in self.anomalies.items() if kind != AnomalyKind.FOREIGN
        ) + sum(self.invalid.values())
        return self.outcomes[Outcome.DELIVERED] > 0 and bad_outcomes == 0 and unexpected == 0

    def as_dict(self) -> dict[str, object]:
        p50, p99 = percentile(self.latencies_ms, 50), percentile(self.latencies_ms, 99)
        return {
            "outcomes": {o.value: self.outcomes[o.value] for o in Outcome},
            "latency_ms": {
                "p50": None if p50 is None else round(p50, 3),
                "p99": None if p99 is None else round(p99, 3),
            },
            "invalid": sum(self.invalid.values()),
            "invalid_by_reason": {r.value: self.invalid[r.value] for r in RejectReason},
            "duplicate": self.anomalies[AnomalyKind.DUPLICATE],
            "out_of_order": self.anomalies[AnomalyKind.OUT_OF_ORDER],
            "resurrected": self.anomalies[AnomalyKind.RESURRECTED],
            "foreign": self.anomalies[AnomalyKind.FOREIGN],
            "sequence_jump": self.anomalies[AnomalyKind.SEQUENCE_JUMP],
            "misrouted": self.anomalies[AnomalyKind.MISROUTED],
            "future_dated": self.anomalies[AnomalyKind.FUTURE_DATED],
            "aborted_read": self.anomalies[AnomalyKind.ABORTED_READ],
            "failing_partitions": [
                p.as_dict() for p in self.worst_partitions()[:FAILING_PARTITIONS_LISTED]
            ],
            "failing_partition_count": len(self.failing),
            "ok": self.ok,
        }


@dataclass
class Tally:
    """A recorder (see probe.stages.stage.Recorder) that keeps everything for the report."""

    target: str
    stages: dict[str, StageTally] = field(default_factory=dict)
    # Why nothing (or not everything) was measured: an unreachable broker, a missing
    # topic. Set, the run fails whatever the stages counted.
    error: str | None = None

    def declare_stage(self, stage: str) -> None:
        self.stages.setdefault(stage, StageTally())

    def count(self, target: str, stage: str, findings: Sequence[Finding]) -> None:
        tally = self.stages.setdefault(stage, StageTally())
        for finding in findings:
            if isinstance(finding, Fate):
                tally.outcomes[finding.outcome.value] += 1
                if finding.latency_ns is not None:
                    tally.latencies_ms.append(finding.latency_ns / 1e6)
                if finding.outcome is not Outcome.DELIVERED:
                    tally.note_failing(finding.key.partition, finding.outcome.value, finding.broker)
            elif isinstance(finding, Anomaly):
                tally.anomalies[finding.kind.value] += 1
                if finding.kind is not AnomalyKind.FOREIGN:
                    tally.note_failing(finding.key.partition, finding.kind.value, None)

    def count_invalid(self, target: str, stage: str, reason: RejectReason) -> None:
        self.stages.setdefault(stage, StageTally()).invalid[reason.value] += 1

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.stages) and all(t.ok for t in self.stages.values())

    def as_dict(self) -> dict[str, object]:
        return {
            "target": self.target,
            "ok": self.ok,
            "error": self.error,
            "stages": {name: t.as_dict() for name, t in sorted(self.stages.items())},
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, sort_keys=False)

    def to_table(self, *, verdict: bool = True) -> str:
        """The table; ``verdict`` False leaves out the closing ``result:`` line."""
        header = (
            "stage",
            "delivered",
            "late",
            "lost",
            "failed",
            "p50 ms",
            "p99 ms",
            "invalid",
            "dup",
            "ooo",
            "result",
        )
        rows = [header] if self.stages else []
        for name, t in sorted(self.stages.items()):
            d = t.as_dict()
            latency = d["latency_ms"]
            assert isinstance(latency, dict)
            rows.append(
                (
                    name,
                    str(t.outcomes[Outcome.DELIVERED]),
                    str(t.outcomes[Outcome.LATE]),
                    str(t.outcomes[Outcome.LOST]),
                    str(t.outcomes[Outcome.PRODUCE_FAILED]),
                    _ms(latency["p50"]),
                    _ms(latency["p99"]),
                    str(d["invalid"]),
                    str(d["duplicate"]),
                    str(d["out_of_order"]),
                    "OK" if t.ok else "FAIL",
                )
            )
        widths = [max((len(row[i]) for row in rows), default=0) for i in range(len(header))]
        lines = [
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
            for row in rows
        ]
        # Anomalies without a column fail the stage too: say which, so a FAIL is never
        # without its reason.
        unlisted = [
            f"{name}: {t.anomalies[kind]} {kind.value}{_MEANING.get(kind, '')}"
            for name, t in sorted(self.stages.items())
            for kind in _UNLISTED
            if t.anomalies[kind]
        ]
        failing = [_failing_line(name, t) for name, t in sorted(self.stages.items()) if t.failing]
        problem = [f"error: {self.error}"] if self.error is not None else []
        closing = [f"result: {'PASS' if self.ok else 'FAIL'}"] if verdict else []
        return "\n".join([f"target {self.target}", *lines, *unlisted, *failing, *problem, *closing])


# The version of `once --json`'s document (docs/once-report.schema.json): raised when
# a field changes meaning or goes away; fields are only ever added within a version.
REPORT_VERSION = 1


@dataclass
class Report:
    """The tallies of every probed target; ok only when every one is.

    One target renders as its :class:`Tally`'s table, several as one table per
    target and a single verdict. As JSON the shape is the same for one target or
    many, so a pipeline parses it one way: ``{"version": 1, "ok": ..., "targets":
    [tally, ...]}`` (docs/once-report.schema.json).
    """

    tallies: list[Tally]

    @property
    def ok(self) -> bool:
        return bool(self.tallies) and all(tally.ok for tally in self.tallies)

    def as_dict(self) -> dict[str, object]:
        return {
            "version": REPORT_VERSION,
            "ok": self.ok,
            "targets": [tally.as_dict() for tally in self.tallies],
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, sort_keys=False)

    def to_table(self) -> str:
        if len(self.tallies) == 1:
            return self.tallies[0].to_table()
        tables = [tally.to_table(verdict=False) for tally in self.tallies]
        return "\n\n".join(tables) + f"\nresult: {'PASS' if self.ok else 'FAIL'}"


# Anomalies that fail a stage but have no column of the table.
_UNLISTED = (
    AnomalyKind.RESURRECTED,
    AnomalyKind.SEQUENCE_JUMP,
    AnomalyKind.MISROUTED,
    AnomalyKind.FUTURE_DATED,
    AnomalyKind.ABORTED_READ,
)
_MEANING = {
    AnomalyKind.FUTURE_DATED: " (produced after they arrived: the producer's clock is ahead)",
    AnomalyKind.ABORTED_READ: " (written in transactions that were aborted, read committed)",
}


def _failing_line(stage: str, tally: StageTally) -> str:
    """``consumer: failing partitions 2 (broker 1): 3 lost; 0 (broker 3): 1 late``."""
    worst = tally.worst_partitions()
    named = "; ".join(p.describe() for p in worst[:FAILING_PARTITIONS_IN_TABLE])
    rest = len(worst) - FAILING_PARTITIONS_IN_TABLE
    more = f"; and {rest} more" if rest > 0 else ""
    return f"{stage}: failing partitions {named}{more}"


def _ms(value: object) -> str:
    return "-" if value is None else f"{value:.1f}"

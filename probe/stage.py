"""A stage: one place downstream where canaries are read back and judged.

A stage turns raw arrivals into findings: it decodes and verifies each record with
the key ring, hands valid canaries of this probe to its judge, and passes every
finding (and every rejected record, with its reason) to its recorders. Producer
acknowledgements reach it too, since only the producer knows what was acked.

The consumer stage (a direct Kafka consumer) is :class:`Stage` fed by a Kafka
transport's arrivals; other stages reuse the same intake with other transports.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Protocol

from probe import tracing
from probe.canary import Canary, decode
from probe.config import StageName
from probe.errors import CanaryRejected, ProduceFailure, RejectReason
from probe.judge import (
    Anomaly,
    AnomalyKind,
    Fate,
    Finding,
    Judge,
    Outcome,
    OwnProbe,
    StreamKey,
)
from probe.keys import KeyRing, KeySource
from probe.transport import Arrival, Transport

log = logging.getLogger(__name__)


class Recorder(Protocol):
    """Where findings go: the Prometheus metrics, the `once` report."""

    def count(self, target: str, stage: str, findings: Sequence[Finding]) -> None: ...

    def count_invalid(self, target: str, stage: str, reason: RejectReason) -> None: ...


class TargetRecorder(Protocol):
    """Where a target's own events go (the Prometheus metrics): rounds, the broker's
    acknowledgements and refusals, readiness, reconnections."""

    def round_started(self, target: str) -> None: ...

    def acked(self, target: str, seconds: float) -> None: ...

    def produce_failed(self, target: str, reason: ProduceFailure) -> None: ...

    def target_ready(self, target: str, ready: bool) -> None: ...

    def target_partitions(self, target: str, count: int) -> None: ...

    def reconnected(self, target: str) -> None: ...


def classify(
    payload: bytes,
    keyring: KeyRing,
    probe_id: str,
    incarnation: int | None = None,
    *,
    max_size: int,
) -> Canary | CanaryRejected | None:
    """A verified canary, why a record is invalid, or None for a foreign record.

    ``probe_id`` and ``incarnation`` are the judging probe's; the Spark sink, which
    judges every incarnation, passes no incarnation. Every stage classifies with this
    one function, the sink's executors included, so a record means the same thing
    wherever it is read.

    A record signed with a key we do not hold that claims another probe id is
    foreign (another probe with its own key shares the topic), not invalid; so is one
    that claims another incarnation of our probe id (an earlier run with an ephemeral
    key, or with a key since dropped), as the judge calls a valid canary of another
    incarnation foreign. A record that claims *this* process (probe id and
    incarnation) with an unknown key, or that fails the signature of a key we hold, is
    invalid: corruption or tampering. The claims are unauthenticated, so this only
    decides which counter moves; a foreign record never becomes a delivered canary.
    """
    try:
        return decode(payload, keyring, max_size=max_size)
    except CanaryRejected as rejected:
        if (
            rejected.reason is RejectReason.UNKNOWN_KEY
            and rejected.claimed_probe_id is not None
            and (
                rejected.claimed_probe_id != probe_id
                or (incarnation is not None and rejected.claimed_incarnation != incarnation)
            )
        ):
            return None
        return rejected


class RejectLog:
    """Log lines for rejected records, bounded: a flood must not become a log flood.

    The first rejection after a quiet period is logged at once, with its partition and
    reason, so an operator sees it as it happens; the rest of the period is summed up
    in one line with counts by reason when the period ends. Times are passed in.
    """

    def __init__(self, where: str, period_ns: int) -> None:
        self._where = where
        self._period_ns = period_ns
        self._since_ns: int | None = None  # start of the current period, if one is open
        self._held: Counter[str] = Counter()

    def rejected(self, partition: int, reason: str, now_ns: int) -> None:
        self.flush(now_ns)
        if self._since_ns is None:
            self._since_ns = now_ns
            log.warning("invalid record on %s partition %d: %s", self._where, partition, reason)
        else:
            self._held[reason] += 1

    def flush(self, now_ns: int) -> None:
        """Close the period if it is over: one summary line for what it held back."""
        if self._since_ns is None or now_ns - self._since_ns < self._period_ns:
            return
        if self._held:
            counts = ", ".join(f"{reason}: {n}" for reason, n in sorted(self._held.items()))
            log.warning(
                "%d more invalid records on %s in the last %.0fs (%s)",
                self._held.total(),
                self._where,
                (now_ns - self._since_ns) / 1e9,
                counts,
            )
            self._held.clear()
            # The summary opens the next period: a flood that goes on is summed up
            # once per period, never logged record by record.
            self._since_ns = now_ns
        else:
            self._since_ns = None


class Stage:
    """Judges one target's canaries as they arrive at one stage.

    >>> stage = Stage("consumer", "kafka", judge, keyring, own=own, recorders=[metrics])
    >>> await stage.consume(transport)  # runs until cancelled

    ``routed``: a canary must be read from the partition it was written to (Kafka
    consumer, MQTT shard subscriber). A bridge stage reads shard canaries from
    whichever Kafka partition the bridge chose, so it only requires the canary's
    shard to be one the probe writes to.
    """

    def __init__(
        self,
        name: StageName,
        target: str,
        judge: Judge,
        keyring: KeySource,
        *,
        own: OwnProbe,
        recorders: Sequence[Recorder],
        max_size: int = 1_048_576,
        routed: bool = True,
        reject_log_period: float = 60.0,
    ) -> None:
        self.name = name
        self.target = target
        self.judge = judge
        self._keyring = keyring
        self._own = own
        self._recorders = recorders
        self._max_size = max_size
        self._routed = routed
        self._rejects = RejectLog(f"{target} stage {name}", int(reject_log_period * 1e9))

    def watch(self, partitions: Sequence[int], now_ns: int) -> None:
        """Track exactly these partitions' staleness, from before their first canary.

        A partition that is gone (a topic re-created with fewer partitions, fewer
        shards configured) stops being tracked, or its staleness would rise forever
        and page on a partition that no longer exists.
        """
        known = set(self.judge.streams())
        wanted = {StreamKey(self._own.probe_id, self.target, p) for p in partitions}
        for key in wanted - known:
            self.judge.watch(key, now_ns)
        for key in known - wanted:
            if key.probe_id == self._own.probe_id and key.target == self.target:
                self.judge.unwatch(key)

    def on_acked(self, canary: Canary, now_ns: int) -> None:
        self._record(self.judge.on_acked(canary, now_ns))

    def on_produce_failed(self, canary: Canary, now_ns: int) -> None:
        self._record(self.judge.on_produce_failed(canary, now_ns))

    def on_arrival(self, arrival: Arrival) -> None:
        verdict = classify(
            arrival.payload,
            self._keyring.ring,
            self._own.probe_id,
            self._own.incarnation,
            max_size=self._max_size,
        )
        if isinstance(verdict, Canary):
            if self._misrouted(verdict, arrival.partition):
                key = StreamKey.of(verdict)
                log.warning(
                    "canary of %s partition %d read on partition %d at stage %s: misrouted",
                    self.target,
                    verdict.partition,
                    arrival.partition,
                    self.name,
                )
                self._record([Anomaly(key, verdict.seq, AnomalyKind.MISROUTED)])
                return
            findings = self.judge.on_arrived(verdict, arrival.at_ns)
            self._record(findings)
            for finding in findings:
                if isinstance(finding, Fate):
                    # The canary's own partition: a bridge stage reads shard canaries
                    # from whichever Kafka partition the bridge chose.
                    tracing.record_arrival(
                        verdict.trace_context,
                        self.name,
                        self.target,
                        verdict.partition,
                        finding.outcome.value,
                    )
        elif verdict is None:
            key = StreamKey("", self.target, arrival.partition)
            self._record([Anomaly(key, -1, AnomalyKind.FOREIGN)])
        else:
            self._rejects.rejected(arrival.partition, verdict.reason.value, arrival.at_ns)
            for recorder in self._recorders:
                recorder.count_invalid(self.target, self.name, verdict.reason)

    def _misrouted(self, canary: Canary, partition: int) -> bool:
        """Our own canary where we did not write it: a forged or replayed partition
        number must not make a stream the probe never wrote to look delivered."""
        own = self._own
        if canary.probe_id != own.probe_id or canary.incarnation != own.incarnation:
            return False  # the judge calls it foreign
        if self._routed and canary.partition != partition:
            return True
        return not self.judge.tracks(StreamKey.of(canary))

    def expire(self, now_ns: int) -> None:
        self._record(self.judge.expire(now_ns))
        self._rejects.flush(now_ns)

    async def consume(self, transport: Transport) -> None:
        async for arrival in transport.arrivals():
            self.on_arrival(arrival)

    def _record(self, findings: Sequence[Finding]) -> None:
        if not findings:
            return
        for finding in findings:
            if isinstance(finding, Fate) and finding.outcome is not Outcome.DELIVERED:
                log.warning(
                    "canary %s/%d seq %d at stage %s: %s",
                    self.target,
                    finding.key.partition,
                    finding.seq,
                    self.name,
                    finding.outcome.value,
                )
            elif isinstance(finding, Anomaly) and finding.kind is AnomalyKind.SEQUENCE_JUMP:
                log.warning(
                    "canary %s/%d seq %d at stage %s: sequence jump, ignored",
                    self.target,
                    finding.key.partition,
                    finding.seq,
                    self.name,
                )
        for recorder in self._recorders:
            recorder.count(self.target, self.name, findings)

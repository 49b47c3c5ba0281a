"""A stage: one place downstream where canaries are read back and judged.

A stage turns raw arrivals into findings: it decodes and verifies each record with
the key ring, hands valid canaries of this probe to its judge, and passes every
finding (and every rejected record, with its reason) to its recorders. Producer
acknowledgements reach it too, since only the producer knows what was acked.

The consumer stage (a direct Kafka consumer) is :class:`Stage` fed by a Kafka
transport's arrivals; other stages reuse the same intake with other transports.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol

from probe import tracing
from probe.config import StageName
from probe.core.canary import Canary, classify
from probe.core.errors import ProduceFailure, RejectReason, TransactionOutcome
from probe.core.judge import (
    Anomaly,
    AnomalyKind,
    Fate,
    Finding,
    Judge,
    Outcome,
    OwnProbe,
    StreamKey,
)
from probe.core.keys import KeySource
from probe.core.reader_signals import ReaderSignals
from probe.core.replicas import TopicReplicas
from probe.transport import Arrival, Transport

log = logging.getLogger(__name__)


class Recorder(Protocol):
    """Where findings go: the Prometheus metrics, the `once` report."""

    def count(self, target: str, stage: str, findings: Sequence[Finding]) -> None: ...

    def count_invalid(self, target: str, stage: str, reason: RejectReason) -> None: ...


class TraceRecorder(Protocol):
    """Where a stage's tracing findings go (the Prometheus metrics)."""

    def trace_header_mismatch(self, target: str, stage: str) -> None: ...


# Pending canaries a stage remembers for their trace context, should they be lost;
# past this many the oldest are forgotten (their loss is logged without a trace id).
_REMEMBERED_ACKS = 100_000


def produced_at(produced_ns: int) -> str:
    """A produce time as the logs write it: RFC 3339, UTC, microseconds.

    >>> produced_at(1_700_000_000_123_456_789)
    '2023-11-14T22:13:20.123456Z'
    """
    moment = datetime.fromtimestamp(produced_ns // 1000 / 1e6, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class TargetRecorder(Protocol):
    """Where a target's own events go (the Prometheus metrics): rounds, the broker's
    acknowledgements and refusals, readiness, reconnections."""

    def round_started(self, target: str) -> None: ...

    def acked(self, target: str, seconds: float) -> None: ...

    def produce_failed(
        self, target: str, reason: ProduceFailure, broker: int | None = None
    ) -> None:
        """``broker``: the one that led the canary's partition (None: unknown)."""

    def target_ready(self, target: str, ready: bool) -> None: ...

    def target_partitions(self, target: str, count: int) -> None: ...

    def target_replicas(self, target: str, topic: TopicReplicas) -> None:
        """The canary topic's leaders, replicas and ISR after a metadata refresh."""

    def reconnected(self, target: str) -> None: ...

    def transaction_ended(self, target: str, outcome: TransactionOutcome) -> None:
        """How one of the transactional stage's transactions ended."""

    def aborted_written(self, target: str) -> None:
        """A canary written in an aborted round's transaction."""

    def reader_signals(self, target: str, signals: ReaderSignals) -> None:
        """What a stage's reader measured beside its canaries (the transactional
        stage's unstable records, the mirror stage's heartbeats and checkpoints)."""


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

    def rejected(
        self, partition: int, reason: str, now_ns: int, fields: Mapping[str, object] | None = None
    ) -> None:
        """``fields``: the record's join fields (probe.logs.JOIN_FIELDS) for its line."""
        self.flush(now_ns)
        if self._since_ns is None:
            self._since_ns = now_ns
            log.warning(
                "invalid record on %s partition %d: %s",
                self._where,
                partition,
                reason,
                extra=dict(fields or {}),
            )
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
        traces: TraceRecorder | None = None,
        reads_committed: bool = False,
    ) -> None:
        self.name = name
        self.target = target
        self.judge = judge
        self._keyring = keyring
        self._own = own
        self._recorders = recorders
        self._max_size = max_size
        self._routed = routed
        # Reads committed records only (the transactional stage): an aborted canary read
        # is an anomaly; any other stage skips aborted canaries (see Canary).
        self._reads_committed = reads_committed
        self._rejects = RejectLog(f"{target} stage {name}", int(reject_log_period * 1e9))
        self._traces = traces
        # What the stage reads (set by consume()): names the topic in spans and logs.
        self._reader: Transport | None = None
        # Acknowledged canaries whose fate is pending, by (incarnation, partition, seq):
        # a loss is declared long after the ack, and its span and log line need the
        # canary's trace context and produce time.
        self._acked: dict[tuple[int, int, int], Canary] = {}
        # The broker that led each pending canary's partition when it was produced
        # (same keys, where known): its fate is counted against that broker.
        self._brokers: dict[tuple[int, int, int], int] = {}
        self._watched: tuple[int, ...] | None = None

    def watch(self, partitions: Sequence[int], now_ns: int) -> None:
        """Track exactly these partitions' staleness, from before their first canary.

        A partition that is gone (a topic re-created with fewer partitions, fewer
        shards configured) stops being tracked, or its staleness would rise forever
        and page on a partition that no longer exists.
        """
        watched = tuple(partitions)
        if watched == self._watched:
            return  # every round: at 10,000 partitions the sets below cost 0.1 s
        self._watched = watched
        known = set(self.judge.streams())
        wanted = {StreamKey(self._own.probe_id, self.target, p) for p in partitions}
        for key in wanted - known:
            self.judge.watch(key, now_ns)
        for key in known - wanted:
            if key.probe_id == self._own.probe_id and key.target == self.target:
                self.judge.unwatch(key)

    def on_acked(self, canary: Canary, now_ns: int, broker: int | None = None) -> None:
        """``broker``: the broker that led the canary's partition when it was produced."""
        findings = self.judge.on_acked(canary, now_ns)
        if not findings:
            ident = _ident(canary)
            self._acked[ident] = canary
            if broker is not None:
                self._brokers[ident] = broker
            if len(self._acked) > _REMEMBERED_ACKS:
                oldest = next(iter(self._acked))
                del self._acked[oldest]
                self._brokers.pop(oldest, None)
        self._record(findings)

    def on_produce_failed(
        self, canary: Canary, now_ns: int, broker: int | None = None, reason: str | None = None
    ) -> None:
        """``reason``: why it was not acknowledged (a ProduceFailure value)."""
        if broker is not None:
            self._brokers[_ident(canary)] = broker
        findings = self.judge.on_produce_failed(canary, now_ns)
        if reason is not None:
            findings = [
                dataclasses.replace(f, reason=reason) if isinstance(f, Fate) else f
                for f in findings
            ]
        self._record(findings, canary)

    def on_arrival(self, arrival: Arrival) -> None:
        verdict = classify(
            arrival.payload,
            self._keyring.ring,
            self._own.probe_id,
            self._own.incarnation,
            max_size=self._max_size,
        )
        if isinstance(verdict, Canary):
            if verdict.aborted:
                self._aborted(verdict, arrival)
                return
            if (
                arrival.traceparent is not None
                and arrival.traceparent != verdict.trace_context
                and self._traces is not None
            ):
                # Counted, never followed: the signed copy is the canary's context.
                self._traces.trace_header_mismatch(self.target, self.name)
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
            self._record(self.judge.on_arrived(verdict, arrival.at_ns), verdict, arrival)
        elif verdict is None:
            key = StreamKey("", self.target, arrival.partition)
            self._record([Anomaly(key, -1, AnomalyKind.FOREIGN)])
        else:
            # The header's context is unverified, but it is the only link a rejected
            # record has to whatever wrote it.
            ids = tracing.ids_of(arrival.traceparent)
            fields = self._join_fields(
                trace_ids=ids,
                probe_id=verdict.claimed_probe_id,
                partition=arrival.partition,
                offset=arrival.offset,
                seq=None,
                produced_ns=None,
                outcome=verdict.reason.value,
            )
            self._rejects.rejected(arrival.partition, verdict.reason.value, arrival.at_ns, fields)
            for recorder in self._recorders:
                recorder.count_invalid(self.target, self.name, verdict.reason)

    def _aborted(self, canary: Canary, arrival: Arrival) -> None:
        if not self._reads_committed:
            return
        log.error(
            "canary of %s partition %d seq %d, written in a transaction that was aborted, "
            "read at stage %s (offset %s), which reads committed records only",
            self.target,
            canary.partition,
            canary.seq,
            self.name,
            arrival.offset,
        )
        self._record([Anomaly(StreamKey.of(canary), canary.seq, AnomalyKind.ABORTED_READ)])

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

    def reads(self, transport: Transport) -> None:
        """What this stage reads: spans and log lines name its topic, arrivals or not."""
        self._reader = transport

    async def consume(self, transport: Transport) -> None:
        self._reader = transport
        async for arrival in transport.arrivals():
            self.on_arrival(arrival)

    def _record(
        self,
        findings: Sequence[Finding],
        canary: Canary | None = None,
        arrival: Arrival | None = None,
    ) -> None:
        """Trace, log and count findings; ``canary`` (and the ``arrival`` it came in)
        when they are about one canary that the stage holds."""
        if not findings:
            return
        traced = [self._traced(finding, canary, arrival) for finding in findings]
        for finding in traced:
            if isinstance(finding, Anomaly) and finding.kind is AnomalyKind.SEQUENCE_JUMP:
                log.warning(
                    "canary %s/%d seq %d at stage %s: sequence jump, ignored",
                    self.target,
                    finding.key.partition,
                    finding.seq,
                    self.name,
                )
        for recorder in self._recorders:
            recorder.count(self.target, self.name, traced)

    def _traced(self, finding: Finding, canary: Canary | None, arrival: Arrival | None) -> Finding:
        """A fate with its canary's trace context, its span recorded, and (unless
        delivered) its log line keyed for joins; anything else as it is."""
        if not isinstance(finding, Fate):
            return finding
        incarnation = canary.incarnation if canary is not None else self._own.incarnation
        ident = (incarnation, finding.key.partition, finding.seq)
        remembered = self._acked.pop(ident, None)
        broker = self._brokers.pop(ident, None)
        if canary is None or canary.seq != finding.seq or StreamKey.of(canary) != finding.key:
            canary = remembered
        if canary is None:
            trace_context = None
            produced_ns = None
        else:
            trace_context, produced_ns = canary.trace_context, canary.produced_ns
        finding = finding.attributed(trace_context, broker)
        delivered = finding.outcome is Outcome.DELIVERED
        # A delivered canary's ids serve its span alone (no log line names them): none
        # to make when spans go nowhere (a fifth of an arrival's cost).
        ids = None if delivered and not tracing.exporting() else self._fate_span(finding, arrival)
        if not delivered:
            fields = self._join_fields(
                trace_ids=ids,
                probe_id=finding.key.probe_id,
                partition=finding.key.partition if arrival is None else arrival.partition,
                offset=None if arrival is None else arrival.offset,
                seq=finding.seq,
                produced_ns=produced_ns,
                outcome=finding.outcome.value,
            )
            log.warning(
                "canary %s/%d seq %d at stage %s: %s",
                self.target,
                finding.key.partition,
                finding.seq,
                self.name,
                finding.outcome.value,
                extra=fields,
            )
        return finding

    def _fate_span(self, fate: Fate, arrival: Arrival | None) -> tracing.TraceIds | None:
        """The fate's span (an arrival, a declared loss); the ids a log line names.

        A produce failure has no span of its own here: the produce span already ended
        with it, so its line names that span.
        """
        produce_ids = tracing.ids_of(fate.trace_context)
        if fate.outcome is Outcome.PRODUCE_FAILED:
            return produce_ids
        reader = self._reader
        hop = tracing.Hop(
            stage=self.name,
            target=self.target,
            system="kafka" if reader is None else reader.messaging_system,
            destination=self._topic(fate.key.partition if arrival is None else arrival.partition)
            or self.target,
            partition=arrival.partition if arrival is not None else None,
            offset=arrival.offset if arrival is not None else None,
        )
        ids = tracing.record_fate(
            fate.trace_context,
            hop,
            seq=fate.seq,
            canary_partition=fate.key.partition,
            outcome=fate.outcome.value,
            latency_s=None if fate.latency_ns is None else fate.latency_ns / 1e9,
            arrived_ns=None if arrival is None else arrival.at_ns,
        )
        return ids or produce_ids

    def _topic(self, partition: int) -> str | None:
        return None if self._reader is None else self._reader.destination(partition)

    def _join_fields(
        self,
        *,
        trace_ids: tracing.TraceIds | None,
        probe_id: str | None,
        partition: int,
        offset: int | None,
        seq: int | None,
        produced_ns: int | None,
        outcome: str,
    ) -> dict[str, object]:
        """A canary's log fields, named as every line names them (probe.logs.JOIN_FIELDS):
        trace and span ids as OpenTelemetry's log correlation names them."""
        return {
            "trace_id": None if trace_ids is None else trace_ids.trace_id,
            "span_id": None if trace_ids is None else trace_ids.span_id,
            "probe_id": probe_id,
            "target": self.target,
            "stage": str(self.name),
            "topic": self._topic(partition),
            "partition": partition,
            "offset": offset,
            "seq": seq,
            "produced_at": None if produced_ns is None else produced_at(produced_ns),
            "outcome": outcome,
        }


def _ident(canary: Canary) -> tuple[int, int, int]:
    return (canary.incarnation, canary.partition, canary.seq)

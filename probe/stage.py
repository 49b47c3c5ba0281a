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
from collections.abc import Sequence
from typing import Protocol

from probe import tracing
from probe.canary import Canary, decode
from probe.errors import CanaryRejected, RejectReason
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

# The Spark sink stage judges in Spark (probe.spark), not in a Stage of this process.
SINK_STAGE = "sink"


class Recorder(Protocol):
    """Where findings go: the Prometheus metrics, the `once` report."""

    def count(self, target: str, stage: str, findings: Sequence[Finding]) -> None: ...

    def count_invalid(self, target: str, stage: str, reason: RejectReason) -> None: ...


def classify(
    payload: bytes, keyring: KeyRing, own: OwnProbe, *, max_size: int
) -> Canary | RejectReason | None:
    """A verified canary, the reason a record is invalid, or None for a foreign record.

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
                rejected.claimed_probe_id != own.probe_id
                or rejected.claimed_incarnation != own.incarnation
            )
        ):
            return None
        return rejected.reason


class Stage:
    """Judges one target's canaries as they arrive at one stage.

    >>> stage = Stage("consumer", "kafka", judge, keyring, own=own, recorders=[metrics])
    >>> await stage.consume(transport)  # runs until cancelled
    """

    def __init__(
        self,
        name: str,
        target: str,
        judge: Judge,
        keyring: KeySource,
        *,
        own: OwnProbe,
        recorders: Sequence[Recorder],
        max_size: int = 1_048_576,
    ) -> None:
        self.name = name
        self.target = target
        self.judge = judge
        self._keyring = keyring
        self._own = own
        self._recorders = recorders
        self._max_size = max_size

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
        verdict = classify(arrival.payload, self._keyring.ring, self._own, max_size=self._max_size)
        if isinstance(verdict, Canary):
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
            log.info(
                "invalid record on %s partition %d: %s", self.target, arrival.partition, verdict
            )
            for recorder in self._recorders:
                recorder.count_invalid(self.target, self.name, verdict)

    def expire(self, now_ns: int) -> None:
        self._record(self.judge.expire(now_ns))

    async def consume(self, transport: Transport) -> None:
        async for arrival in transport.arrivals():
            self.on_arrival(arrival)

    def _record(self, findings: Sequence[Finding]) -> None:
        if not findings:
            return
        for finding in findings:
            if isinstance(finding, Fate) and finding.outcome is not Outcome.DELIVERED:
                log.warning(
                    "canary %s/%d seq %d: %s",
                    self.target,
                    finding.key.partition,
                    finding.seq,
                    finding.outcome.value,
                )
        for recorder in self._recorders:
            recorder.count(self.target, self.name, findings)

"""The canary producer: one signed canary to every partition of a target per round.

Sequence numbers are contiguous per partition among acknowledged canaries: a
partition's number advances only when the broker acknowledged the canary, so a
canary that failed to produce gives its number to the next one, and a gap seen by a
stage that never hears of acks (the Spark sink) is a canary the broker acknowledged
and then lost.

Rounds may overlap (the service starts one on every tick, whatever the previous one
does), so every canary gets its own fate within its own send timeout, counted from
its round's start, plus the time the round's pacing held it back. Per partition,
canaries still go out one at a time, in round order: a canary waits for its
predecessor on the partition to settle before it is numbered and sent, which keeps
the numbers contiguous among acknowledged canaries. One still waiting when its
timeout runs out is ``produce_failed`` (timeout), as a send that got no
acknowledgement in time is.

A round is paced: canaries start at most one per ``spacing`` seconds on average, in
bursts, so a round of thousands of partitions is spread out instead of sent as one
burst, which would saturate the probe and make its arrivals wait behind its own
sends (measured as the pipeline's latency). A round never spreads over more than
``spread_within`` seconds (a share of the interval), so rounds do not pile up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from probe import tracing
from probe.core.canary import Canary, encode
from probe.core.errors import ProduceFailed, ProduceFailure
from probe.core.judge import OwnProbe
from probe.core.keys import KeySource
from probe.stages.stage import Stage, TargetRecorder
from probe.transport import Transport

log = logging.getLogger(__name__)


def next_tick_ns(now_ns: int, interval_ns: int) -> int:
    """The next multiple of the interval after now, so probes with the same interval
    produce in step wherever and whenever they started.

    >>> next_tick_ns(41_000, 20_000)
    60000
    >>> next_tick_ns(40_000, 20_000)
    60000
    """
    return (now_ns // interval_ns + 1) * interval_ns


# Paced canaries start in bursts about this far apart: one timer per burst, and the
# canaries of a burst share the client's produce requests (20 at the default 1,000
# canaries a second). Bursts 50 ms apart (a round of 30 partitions in one produce
# request per broker) cut the CPU per canary by a further third on Apache Kafka's
# three brokers, but raised the canaries' p50 from 21-23 to 28-30 ms and their p99
# from 190 to 250-310 ms (two runs each, a round a second): a slow produce request
# then holds ten canaries instead of six or seven.
PACING_TICK = 0.02


def burst_size(spacing: float, max_in_flight: int | None) -> int:
    """How many canaries start together when they are ``spacing`` seconds apart on
    average: a transport's in-flight window, else as many as one pacing tick holds.

    >>> burst_size(0.001, None), burst_size(0.001, 20), burst_size(0.5, None)
    (20, 20, 1)
    """
    if max_in_flight is not None:
        return max_in_flight
    return max(1, round(PACING_TICK / spacing)) if spacing else 1


def round_spacing(spacing: float, partitions: int, spread_within: float | None) -> float:
    """The spacing a round of this many partitions is sent at: ``spacing``, or closer
    together when the round would take longer than ``spread_within`` seconds.

    >>> round_spacing(0.001, 10_000, 8.0)
    0.0008
    >>> round_spacing(0.001, 100, 8.0)
    0.001
    """
    if spacing and spread_within is not None and partitions * spacing > spread_within:
        return spread_within / partitions
    return spacing


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class CanaryProducer:
    """Writes rounds of canaries and tells every in-process stage about each ack."""

    def __init__(
        self,
        *,
        own: OwnProbe,
        target: str,
        transport: Transport,
        keyring: KeySource,
        stages: Sequence[Stage],
        metrics: TargetRecorder | None = None,
        pad_to: int = 0,
        max_in_flight: int | None = None,
        spacing: float = 0.0,
        send_timeout: float = 10.0,
        clock_ns: Callable[[], int] = time.time_ns,
        leader_of: Callable[[int], int | None] = lambda partition: None,
        abort_every: int = 0,
    ) -> None:
        """``leader_of``: the broker leading a partition now, per the last metadata
        refresh (None where unknown or there is none): a canary's fate is counted
        against the broker that led its partition when it was produced.

        ``abort_every``: every this many rounds one is written in transactions that
        are aborted (the transport writes in transactions: the transactional stage's
        writes); its canaries are marked aborted, no stage expects them, and they take
        no seq (see Canary). 0: never."""
        self._abort_every = abort_every
        self._rounds = 0
        self._leader_of = leader_of
        self._own = own
        self._target = target
        self._transport = transport
        self._keyring = keyring
        self._stages = stages
        self._metrics = metrics
        self._pad_to = pad_to
        self._clock_ns = clock_ns
        self._next_seq: dict[int, int] = {}
        self._max_in_flight = max_in_flight
        self._spacing = spacing
        self._send_timeout = send_timeout
        # Per partition, settled when its latest canary (and every one before) is.
        self._settled: dict[int, asyncio.Future[None]] = {}
        # The last produce the cluster's ACLs refused, in words (the ACL to grant):
        # logged when it first comes or changes, not once per canary.
        self.refusal: str | None = None

    async def produce_round(
        self,
        partitions: Sequence[int],
        deadline: float | None = None,
        spread_within: float | None = None,
    ) -> None:
        """One canary to each partition; returns when all are settled.

        ``deadline`` (event-loop time) is when the round's first canaries count as
        failed if not acknowledged; default: the send timeout from now. A round that
        started earlier (its metadata refresh took a while) passes its own. A canary
        the pacing held back gets that much longer. ``spread_within``: the longest the
        round's pacing may take (seconds), or None for no bound.
        """
        if self._metrics is not None:
            self._metrics.round_started(self._target)
        every = self._abort_every
        aborting = bool(every) and self._rounds % every == every - 1
        self._rounds += 1
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + self._send_timeout
        spacing = round_spacing(self._spacing, len(partitions), spread_within)
        if self._max_in_flight is None and not spacing:
            await asyncio.gather(*(self._produce(p, deadline, aborting) for p in partitions))
            return
        # Canaries are stamped when they are created, so whatever queue they wait in
        # inside the probe would be measured as the pipeline's latency. A transport
        # that sends a few at a time (MQTT's in-flight window) gets them a few at a
        # time; with a spacing, they also start at most one per `spacing` seconds on
        # average, so a round of many partitions does not saturate the probe, whose
        # arrivals would then wait behind its own sends. They start in bursts: one
        # timer per burst, and the sends of a burst share writes.
        burst = burst_size(spacing, self._max_in_flight)
        window = asyncio.Semaphore(self._max_in_flight or len(partitions) or 1)
        paced_from = next_burst = loop.time()
        held = 0.0
        sends: list[asyncio.Task[None]] = []
        try:
            for count, partition in enumerate(partitions):
                await window.acquire()
                if spacing and count % burst == 0:
                    await asyncio.sleep(max(0.0, next_burst - loop.time()))
                    next_burst = max(next_burst, loop.time()) + burst * spacing
                    held = loop.time() - paced_from
                sends.append(
                    asyncio.create_task(
                        self._produce_releasing(partition, deadline + held, window, aborting)
                    )
                )
        except asyncio.CancelledError:
            for send in sends:
                send.cancel()
            raise
        await asyncio.gather(*sends)

    async def _produce_releasing(
        self, partition: int, deadline: float, window: asyncio.Semaphore, aborting: bool
    ) -> None:
        try:
            await self._produce(partition, deadline, aborting)
        finally:
            window.release()

    async def _produce(self, partition: int, deadline: float, aborting: bool = False) -> None:
        """One canary to one partition, after the partition's previous one settled."""
        previous = self._settled.get(partition)
        settled = asyncio.get_running_loop().create_future()
        self._settled[partition] = settled
        try:
            if previous is not None and not previous.done():
                try:
                    async with asyncio.timeout_at(deadline):
                        await asyncio.shield(previous)
                except TimeoutError:
                    if not aborting:
                        self._failed(
                            self._canary(partition, None),
                            ProduceFailed(ProduceFailure.TIMEOUT),
                            self._leader_of(partition),
                        )
                    return
            await self._send(partition, deadline, aborting)
        finally:
            # Settled only once the predecessor is too: the next canary must never
            # overtake one still in flight on the same partition.
            if previous is None or previous.done():
                settled.set_result(None)
            else:
                previous.add_done_callback(lambda _: _settle(settled))

    def _canary(self, partition: int, trace_context: str | None, aborted: bool = False) -> Canary:
        return Canary(
            probe_id=self._own.probe_id,
            incarnation=self._own.incarnation,
            target=self._target,
            partition=partition,
            seq=self._next_seq.get(partition, 0),
            produced_ns=self._clock_ns(),
            trace_context=trace_context,
            aborted=aborted,
        )

    async def _send(self, partition: int, deadline: float, aborting: bool = False) -> None:
        seq = self._next_seq.get(partition, 0)
        broker = self._leader_of(partition)
        transport = self._transport
        with tracing.produce_span(
            system=transport.messaging_system,
            destination=transport.destination(partition),
            partition=partition,
            target=self._target,
            probe_id=self._own.probe_id,
            seq=seq,
        ) as span:
            # The signed copy inside the canary is the one stages trust; the same
            # context also goes beside it (Kafka headers, MQTT 5 user properties) for
            # tracing clients and collectors that cannot read canaries.
            canary = self._canary(partition, span.traceparent, aborting)
            payload = encode(canary, self._keyring.ring, pad_to=self._pad_to)
            started = time.monotonic()
            try:
                async with asyncio.timeout_at(deadline):
                    offset = await transport.send(
                        partition, payload, span.carrier, aborting=aborting
                    )
            except TimeoutError:
                # A broker that kept answering "no" (not enough replicas) while the
                # client retried says why; silence is a plain timeout.
                reason = transport.refused(partition, started) or ProduceFailure.TIMEOUT
                span.failed(reason.value)
                self._failed(canary, ProduceFailed(reason), broker)
                return
            except ProduceFailed as failure:
                span.failed(failure.reason.value)
                self._failed(canary, failure, broker)
                return
            span.acked(offset)
        acked_ns = self._clock_ns()
        if canary.aborted:
            # Expected nowhere, and its seq is the next canary's (see Canary).
            if self._metrics is not None:
                self._metrics.aborted_written(self._target)
            return
        self._next_seq[partition] = seq + 1
        if self._metrics is not None:
            self._metrics.acked(self._target, (acked_ns - canary.produced_ns) / 1e9)
        for stage in self._stages:
            stage.on_acked(canary, acked_ns, broker)

    def _failed(self, canary: Canary, failure: ProduceFailed, broker: int | None = None) -> None:
        if canary.aborted:
            return  # no stage expected it; the transaction's outcome is counted
        now_ns = self._clock_ns()
        if failure.reason is ProduceFailure.NOT_AUTHORIZED and failure.detail != self.refusal:
            self.refusal = failure.detail
            log.error("target %s: %s", self._target, failure.detail)
        if self._metrics is not None:
            self._metrics.produce_failed(self._target, failure.reason, broker)
        for stage in self._stages:
            stage.on_produce_failed(canary, now_ns, broker, failure.reason.value)

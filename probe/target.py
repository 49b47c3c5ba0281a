"""One probed target, assembled: transport, producer, stages and their judge.

This is the imperative shell around the pure core for one Kafka target. `run` drives
it forever on wall-clock ticks; `once` drives a few quick rounds and waits for every
canary's fate. Both share the sequence of a round: refresh the partition list, make
sure the consumer reads every partition (before anything is produced to it, so the
first canary of a new partition is never misjudged as lost), then produce.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_delay,
    stop_never,
    wait_exponential,
)

from probe.config import ProbeConfig
from probe.errors import TransportError
from probe.judge import Judge, JudgePolicy, OwnProbe
from probe.keys import KeyRing
from probe.metrics import ProbeMetrics
from probe.producer import CanaryProducer, next_tick_ns
from probe.stage import Recorder, Stage
from probe.transport.kafka import KafkaTransport

log = logging.getLogger(__name__)

CONSUMER_STAGE = "consumer"


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


class TargetProbe:
    """A Kafka target with its consumer stage.

    >>> probe = TargetProbe(config, keyring, [metrics], metrics=metrics)
    >>> await probe.connect()
    >>> await probe.produce_round()
    """

    def __init__(
        self,
        config: ProbeConfig,
        keyring: KeyRing,
        recorders: Sequence[Recorder],
        *,
        metrics: ProbeMetrics | None = None,
        loss_timeout: float | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.config = config
        self.target = config.target
        self._keyring = keyring
        self._metrics = metrics
        self._clock_ns = clock_ns
        self.own = OwnProbe(config.probe_id, incarnation=clock_ns())
        policy = JudgePolicy(
            freshness_ns=_ns(config.judge.freshness),
            loss_timeout_ns=_ns(loss_timeout or config.judge.loss_timeout),
        )
        self.judge = Judge(policy, own=self.own)
        self.stage = Stage(
            CONSUMER_STAGE,
            self.target,
            self.judge,
            keyring,
            own=self.own,
            recorders=recorders,
            max_size=config.canary.max_size,
        )
        if metrics is not None:
            metrics.declare_target(self.target)
            metrics.declare_stage(self.target, CONSUMER_STAGE, self.judge)
        self.transport: KafkaTransport | None = None
        self.producer: CanaryProducer | None = None
        self.partitions: list[int] = []
        self._ready = False
        self._reason = "not connected yet"

    # -- readiness -------------------------------------------------------------------

    def readiness(self) -> tuple[bool, str]:
        return self._ready, self._reason

    def _set_ready(self, ready: bool, reason: str) -> None:
        if ready != self._ready:
            log.log(
                logging.INFO if ready else logging.WARNING, "target %s: %s", self.target, reason
            )
        self._ready, self._reason = ready, reason
        if self._metrics is not None:
            self._metrics.ready.labels(self.target).set(1 if ready else 0)

    # -- lifecycle -------------------------------------------------------------------

    async def connect(self, give_up_after: float | None = None) -> None:
        """Connect, retrying with backoff; forever unless give_up_after (seconds) is set."""
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(TransportError),
            wait=wait_exponential(multiplier=0.25, max=30),
            stop=stop_never if give_up_after is None else stop_after_delay(give_up_after),
            before_sleep=self._log_retry,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                await self._connect_once()

    def _log_retry(self, state: RetryCallState) -> None:
        delay = state.next_action.sleep if state.next_action else 0.0
        log.warning("target %s: %s; retrying in %.1fs", self.target, self._reason, delay)

    async def _connect_once(self) -> None:
        transport = KafkaTransport(self.config.kafka)
        try:
            await transport.start()
        except TransportError as exc:
            self._set_ready(False, str(exc))
            raise
        self.transport = transport
        self.producer = CanaryProducer(
            own=self.own,
            target=self.target,
            transport=transport,
            keyring=self._keyring,
            stages=[self.stage],
            metrics=self._metrics,
            pad_to=self.config.canary.size,
            clock_ns=self._clock_ns,
        )
        await self.refresh()

    async def close(self) -> None:
        if self.transport is not None:
            await self.transport.close()

    # -- rounds ----------------------------------------------------------------------

    async def refresh(self) -> list[int]:
        """The topic's partitions, covered by the consumer. Keeps the last list on failure."""
        assert self.transport is not None, "connect() first"
        kafka = self.config.kafka
        try:
            async with asyncio.timeout(kafka.send_timeout):
                partitions = await self.transport.partitions()
                # A topic can vanish (deleted, or a broker that lost its storage);
                # with create_topic the probe puts it back rather than going silent.
                if not partitions and kafka.create_topic:
                    await self.transport.ensure_topic(kafka.partitions, kafka.replication_factor)
                    partitions = await self.transport.partitions()
                if partitions:
                    await self.transport.cover(partitions)
        except (TransportError, TimeoutError) as exc:
            self._set_ready(False, f"metadata refresh failed: {exc or 'timeout'}")
            return self.partitions
        if not partitions:
            self._set_ready(False, f"topic {kafka.topic} not found")
            return self.partitions
        if partitions != self.partitions:
            log.info("target %s: partitions %s", self.target, partitions)
        self.partitions = partitions
        self.stage.watch(partitions, self._clock_ns())
        if self._metrics is not None:
            self._metrics.partitions.labels(self.target).set(len(partitions))
        self._set_ready(True, f"topic {kafka.topic}: {len(partitions)} partitions")
        return partitions

    async def produce_round(self) -> None:
        """Refresh metadata, then one canary to every partition the consumer covers.

        When the refresh fails the last known partitions are used, so an outage shows
        up as produce failures rather than as silence.
        """
        assert self.producer is not None, "connect() first"
        partitions = await self.refresh()
        await self.producer.produce_round(partitions)

    async def run_rounds(self, interval: float, stop: asyncio.Event) -> None:
        """Produce on every wall-clock tick of the interval until stop is set.

        A round that overruns its tick skips the ticks it missed rather than
        bunching canaries up (sequence numbers must not overlap on a partition).
        """
        interval_ns = _ns(interval)
        while not stop.is_set():
            tick = next_tick_ns(self._clock_ns(), interval_ns)
            delay = (tick - self._clock_ns()) / 1e9
            try:
                await asyncio.wait_for(stop.wait(), timeout=max(0.0, delay))
                return
            except TimeoutError:
                pass
            await self.produce_round()

    async def consume(self) -> None:
        assert self.transport is not None, "connect() first"
        await self.stage.consume(self.transport)

    async def expire_forever(self, period: float = 1.0) -> None:
        """The judge's clock: decide `lost` for canaries past their loss timeout."""
        while True:
            self.stage.expire(self._clock_ns())
            await asyncio.sleep(period)

"""One probed target, assembled: transport, producer, stages and their judges.

This is the imperative shell around the pure core for one target: a Kafka topic
(stage ``consumer``) or a set of MQTT shard topics (stage ``mqtt``, and ``bridge`` for
an MQTT-to-Kafka bridge path). `run` drives every configured target forever on
wall-clock ticks; `once` drives a few quick rounds and waits for every canary's fate.
Both share the sequence of a round: refresh the partition (shard) list, make sure
every stage's reader covers it (before anything is produced to it, so the first
canary of a new partition is never misjudged as lost), then produce.

Each stage has its own judge (a canary has one fate *per stage*) and hears of every
acknowledgement. The bridge stage reads a Kafka topic that a bridge fills from the
MQTT shards; whatever Kafka partition a canary lands on, it is judged on the stream
of its own shard, read from the canary itself.
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
    stop_before_delay,
    stop_never,
    wait_exponential,
)

from probe.config import ProbeConfig, StageName, TargetKind
from probe.core.errors import ConnectFailed, TransactionOutcome, TransportError
from probe.core.judge import Judge, JudgePolicy, OwnProbe
from probe.core.keys import KeySource
from probe.core.leadership import LeaderKeeper, LeaderPlan, plan_leaders
from probe.core.partition_summary import partitions_summary
from probe.core.replicas import TopicReplicas, replica_health
from probe.metrics import ProbeMetrics
from probe.stages.producer import CanaryProducer, next_tick_ns
from probe.stages.stage import Recorder, Stage
from probe.transport import TRANSPORTS, Transport

log = logging.getLogger(__name__)


def target_name(config: ProbeConfig, kind: TargetKind) -> str:
    """The `target` label of the target of this kind."""
    return TRANSPORTS[kind].layout(config).label


def target_names(config: ProbeConfig) -> list[str]:
    """The `target` labels of every configured target: what a probe's traces say it
    probes (probe.tracing's resource)."""
    return [target_name(config, kind) for kind in config.targets]


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


# A paced round spreads over at most this share of the interval: the rest is slack
# for the last canaries' acknowledgements before the next round starts.
SPREAD_SHARE = 0.8
# A round waits on its metadata refresh for at most this share of the send timeout
# when it already knows the partitions, then sends with those. aiokafka asks one
# broker, picked at random, for metadata: one that accepts connections and never
# answers held the refresh for the whole request timeout, the round's canaries to
# every healthy broker then failed at the deadline, and the burn was blamed on all
# brokers instead of the one cut off. The refresh goes on in the background.
REFRESH_SHARE = 0.25
# While settling (after the last round of `once`), stages with readers of their own
# are covered again this often, seconds.
SETTLE_REFRESH = 1.0


class TargetProbe:
    """One target with its stages: ``kind`` is a key of TRANSPORTS (kafka, mqtt).

    >>> probe = TargetProbe(config, keyring, [metrics], metrics=metrics, kind="mqtt")
    >>> await probe.connect()
    >>> await probe.produce_round()

    ``stage`` and ``judge`` are the first stage's (the only one of a Kafka target).
    """

    def __init__(
        self,
        config: ProbeConfig,
        keyring: KeySource,
        recorders: Sequence[Recorder],
        *,
        kind: TargetKind = TargetKind.KAFKA,
        metrics: ProbeMetrics | None = None,
        loss_timeout: float | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.config = config
        self.kind = kind
        self.layout = TRANSPORTS[kind].layout(config)
        self.target = self.layout.label
        self._keyring = keyring
        self._metrics = metrics
        self._clock_ns = clock_ns
        self.own = OwnProbe(config.probe_id, incarnation=clock_ns())
        policy = JudgePolicy(
            freshness_ns=_ns(config.judge.freshness),
            # A canary cannot be lost before it could have been late: `once` may ask
            # for a loss timeout shorter than the configured freshness.
            loss_timeout_ns=_ns(
                max(loss_timeout or config.judge.loss_timeout, config.judge.freshness)
            ),
        )
        self.stages = [
            Stage(
                name,
                self.target,
                Judge(policy, own=self.own),
                keyring,
                own=self.own,
                recorders=recorders,
                max_size=config.canary.max_size,
                routed=self.layout.routed(name),
                reject_log_period=config.interval,
                traces=metrics,
                reads_committed=name is StageName.TRANSACTIONAL,
            )
            for name in self.layout.stages
        ]
        self.stage = self.stages[0]
        self.judge = self.stage.judge
        if metrics is not None:
            metrics.declare_target(self.target)
            for stage in self.stages:
                metrics.declare_stage(self.target, stage.name, stage.judge)
        self.transport: Transport | None = None
        # Stages that read somewhere else than the target's own transport (the bridge).
        self._readers: dict[StageName, Transport] = {}
        self.producer: CanaryProducer | None = None
        self.partitions: list[int] = []
        # Leaders, replicas and ISR as the last refresh saw them (None: unknown, or MQTT).
        self.replicas: TopicReplicas | None = None
        self._leaders = LeaderKeeper()
        self._spreading: asyncio.Task[None] | None = None
        self._refreshing: asyncio.Task[list[int]] | None = None
        # None until the first outcome of connecting is known: the first state, ready
        # or not, is logged (a topic missing from the start must not go unsaid).
        self._ready: bool | None = None
        self._reason = "not connected yet"

    # -- readiness -------------------------------------------------------------------

    def readiness(self) -> tuple[bool, str]:
        return bool(self._ready), self._reason

    def _set_ready(self, ready: bool, reason: str) -> None:
        if ready != self._ready:
            log.log(
                logging.INFO if ready else logging.WARNING, "target %s: %s", self.target, reason
            )
        self._ready, self._reason = ready, reason
        if self._metrics is not None:
            self._metrics.target_ready(self.target, ready)

    # -- lifecycle -------------------------------------------------------------------

    async def connect(self, give_up_after: float | None = None) -> None:
        """Connect, retrying with backoff; forever unless give_up_after (seconds) is set."""
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(TransportError),
            wait=wait_exponential(multiplier=0.25, max=30),
            stop=stop_never if give_up_after is None else stop_before_delay(give_up_after),
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
        transport = TRANSPORTS[self.kind].transport(
            self.config,
            on_reconnect=self._count_reconnect,
            on_connect_failed=self._connect_failed,
            on_transaction=self._transaction_ended,
        )
        try:
            await transport.start()
        except TransportError as exc:
            self._connect_failed(exc)
            self._set_ready(False, str(exc))
            raise
        if self.layout.readers:
            await self._topic_before_readers(transport)
        readers: dict[StageName, Transport] = {}
        for stage, build in self.layout.readers.items():
            recorder = None if self._metrics is None else self._metrics.group.of(stage)
            reader = readers[stage] = build(recorder)
            try:
                await reader.start()
            except TransportError as exc:
                await asyncio.gather(*(t.close() for t in (transport, *readers.values())))
                self._connect_failed(exc)
                self._set_ready(False, f"{stage}: {exc}")
                raise
        self.transport = transport
        self._readers = readers
        for judged in self.stages:
            judged.reads(readers.get(judged.name, transport))
        self.producer = CanaryProducer(
            own=self.own,
            target=self.target,
            transport=transport,
            keyring=self._keyring,
            stages=self.stages,
            metrics=self._metrics,
            pad_to=self.config.canary.size,
            max_in_flight=transport.max_in_flight,
            spacing=self.layout.spacing,
            send_timeout=self.layout.send_timeout,
            clock_ns=self._clock_ns,
            leader_of=self._leader_of,
            abort_every=self.layout.abort_every,
        )
        await self.refresh()

    async def _topic_before_readers(self, transport: Transport) -> None:
        """Provision the topic before the readers of other stages start: a group
        member that joins before the topic exists is assigned nothing, and its group
        rebalances onto the topic only after its metadata shows it and the coordinator's
        join delay (5 s on the embedded broker), every canary of the first rounds
        judged lost meanwhile. A failure here is the round's refresh to report."""
        try:
            async with asyncio.timeout(self.layout.send_timeout):
                if not await transport.partitions():
                    await transport.provision()
        except (TimeoutError, TransportError) as exc:
            log.debug("target %s: topic before readers: %r", self.target, exc)

    def _keep_every_broker_leading(self, transport: Transport, replicas: TopicReplicas) -> None:
        """With topic management on, give every broker the lead of a canary partition
        (probe.core.leadership), in the background: admin requests may take long, a round
        must not wait for them. Acts only when the broker set changed, at most every
        LeaderKeeper.min_gap, so it never churns."""
        if not (self.kind is TargetKind.KAFKA and self.config.kafka.create_topic):
            return
        if self._spreading is not None and not self._spreading.done():
            return
        now = time.monotonic()
        if not self._leaders.due(replicas.brokers, now):
            return
        plan = plan_leaders(replicas)
        if not self.config.kafka.move_leaders:
            plan = LeaderPlan(grow_to=plan.grow_to)  # growing the topic moves no leader
        if plan.empty:
            # A broker back from a restart is elected only once it is in sync again:
            # until then the plan is empty but the broker still leads nothing, and the
            # next refresh plans again (pure and cheap) rather than settling without it.
            if not replica_health(replicas).leaderless_brokers:
                self._leaders.settled(replicas.brokers)
            return
        self._leaders.acted(now)
        self._spreading = asyncio.create_task(
            self._spread(transport, plan, replicas), name=f"leaders {self.target}"
        )

    async def _spread(
        self, transport: Transport, plan: LeaderPlan, replicas: TopicReplicas
    ) -> None:
        leaderless = replica_health(replicas).leaderless_brokers
        log.info(
            "target %s: brokers %s lead no canary partition; plan: grow to %s, reassign %s, "
            "elect %s",
            self.target,
            list(leaderless),
            plan.grow_to,
            # Summaries: a 10,000-partition topic may move thousands at once.
            partitions_summary(change.partition for change in plan.reassign),
            partitions_summary(plan.elect),
        )
        problems = await transport.spread_leaders(plan)
        if problems:
            log.warning(
                "target %s: cannot give every broker a canary partition to lead (%s); brokers "
                "leading none are not measured (synthetic_sla_brokers_without_canary_leader)",
                self.target,
                "; ".join(problems),
            )

    def _leader_of(self, partition: int) -> int | None:
        return None if self.replicas is None else self.replicas.leader_of(partition)

    def _connect_failed(self, error: TransportError) -> None:
        """A connection failed with a named cause: at start, or lost mid-run and refused."""
        if self._metrics is not None and isinstance(error, ConnectFailed):
            self._metrics.connect_failed(self.target, error.reason, error.broker)

    def _transaction_ended(self, outcome: TransactionOutcome) -> None:
        if self._metrics is not None:
            self._metrics.transaction_ended(self.target, outcome)

    def _count_reconnect(self) -> None:
        if self._metrics is not None:
            self._metrics.reconnected(self.target)

    async def close(self) -> None:
        if self._spreading is not None:
            self._spreading.cancel()
        transports = [t for t in (self.transport, *self._readers.values()) if t is not None]
        await asyncio.gather(*(transport.close() for transport in transports))

    # -- rounds ----------------------------------------------------------------------

    async def refresh(self) -> list[int]:
        """The partitions (shards), covered by every stage. Keeps the last list on failure.

        A bridge stage that cannot read makes the target unready but does not stop
        the round: its canaries are then judged lost, which is what the bridge path did.
        """
        assert self.transport is not None, "connect() first"
        timeout = self.layout.send_timeout
        transport = self.transport
        try:
            async with asyncio.timeout(timeout):
                partitions = await transport.partitions()
                # A topic can vanish (deleted, or a broker that lost its storage):
                # the transport puts it back if it may, rather than going silent.
                if not partitions:
                    await transport.provision()
                    partitions = await transport.partitions()
                if partitions and any(s.name not in self._readers for s in self.stages):
                    await transport.cover(partitions)
        except TimeoutError:
            self._set_ready(False, f"no answer from the broker within {timeout:g}s")
            return self.partitions
        except TransportError as exc:
            self._set_ready(False, str(exc))
            return self.partitions
        if not partitions:
            self._set_ready(False, transport.describe(partitions))
            return self.partitions
        if partitions != self.partitions:
            log.info("target %s: %s", self.target, partitions_summary(partitions))
        self.partitions = partitions
        now_ns = self._clock_ns()
        for stage in self.stages:
            stage.watch(partitions, now_ns)
        self.replicas = transport.replicas()
        if self.replicas is not None:
            self._keep_every_broker_leading(transport, self.replicas)
        if self._metrics is not None:
            self._metrics.target_partitions(self.target, len(partitions))
            if self.replicas is not None:
                self._metrics.target_replicas(self.target, self.replicas)
        problems = [
            await self._cover_reader(name, reader, timeout)
            for name, reader in self._readers.items()
        ]
        # Covered is not read: a fetch that keeps failing (say, a codec) is unready too.
        problems.insert(0, transport.read_problem() or "")
        problem = "; ".join(p for p in problems if p)
        self._set_ready(not problem, problem or transport.describe(partitions))
        return partitions

    async def _cover_reader(self, stage: StageName, reader: Transport, within: float) -> str:
        """Cover every partition of a stage's own reader; the problem, or "" if none."""
        try:
            async with asyncio.timeout(within):
                found = await reader.partitions()
                if found:
                    await reader.cover(found)
        except (TransportError, TimeoutError) as exc:
            return f"{stage}: {str(exc) or 'timeout'}"
        if not found:
            return f"{stage}: {reader.describe(found)}"
        if self._metrics is not None:
            self._metrics.reader_signals(self.target, reader.signals())
        problem = reader.read_problem()
        return f"{stage}: {problem}" if problem else ""

    async def produce_round(self, spread_within: float | None = None) -> None:
        """Refresh metadata, then one canary to every partition the consumer covers.

        When the refresh fails the last known partitions are used, so an outage shows
        up as produce failures rather than as silence. Rounds may overlap: while an
        earlier round's refresh still waits on the broker, a round takes the last known
        partitions instead of a second refresh, and a refresh slower than its share
        of the send timeout is left to finish in the background. Every canary of the round is
        acknowledged or failed within the send timeout from the round's start, plus
        the time the round's pacing held it back (at most ``spread_within`` seconds).
        """
        assert self.producer is not None, "connect() first"
        deadline = asyncio.get_running_loop().time() + self.layout.send_timeout
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.create_task(self.refresh(), name=f"refresh {self.target}")
            partitions = await self._refreshed(self._refreshing)
        else:
            partitions = self.partitions
        await self.producer.produce_round(partitions, deadline, spread_within)

    async def _refreshed(self, refreshing: asyncio.Task[list[int]]) -> list[int]:
        """The refresh's partitions, or the last known ones once it takes more than
        REFRESH_SHARE of the send timeout (waited out in full while none is known)."""
        if not self.partitions:
            return await refreshing
        try:
            async with asyncio.timeout(REFRESH_SHARE * self.layout.send_timeout):
                return await asyncio.shield(refreshing)
        except TimeoutError:
            return self.partitions

    async def run_rounds(self, interval: float, stop: asyncio.Event) -> None:
        """Start a round on every wall-clock tick of the interval until stop is set.

        Every tick is a round, whatever the previous ones do: a round blocked on an
        unreachable broker must not swallow the ticks after it, or an outage would be
        counted in fewer canaries than it lasted. A round ends within two send
        timeouts (refresh, then sends) plus its pacing (under the interval), so at
        most ``2 * send_timeout / interval + 2`` rounds are ever in flight. On stop,
        rounds still in flight are cancelled.
        """
        interval_ns = _ns(interval)
        rounds: set[asyncio.Task[None]] = set()
        # The loop's timers run on the monotonic clock and may wake a little before
        # the wall clock reaches the tick: the next tick is counted from the last one
        # started, never from a clock still short of it, or that tick would start a
        # second round (it did, one tick in three at 10,000 partitions: 22 % more
        # canaries than the interval says).
        last_tick = 0
        try:
            while not stop.is_set():
                tick = next_tick_ns(max(self._clock_ns(), last_tick), interval_ns)
                last_tick = tick
                delay = (tick - self._clock_ns()) / 1e9
                try:
                    await asyncio.wait_for(stop.wait(), timeout=max(0.0, delay))
                    return
                except TimeoutError:
                    pass
                round_ = asyncio.create_task(
                    self.produce_round(spread_within=SPREAD_SHARE * interval),
                    name=f"round {self.target}",
                )
                rounds.add(round_)
                round_.add_done_callback(self._round_done(rounds))
        finally:
            for round_ in rounds:
                round_.cancel()
            await asyncio.gather(*rounds, return_exceptions=True)

    def _round_done(self, rounds: set[asyncio.Task[None]]) -> Callable[[asyncio.Task[None]], None]:
        def done(round_: asyncio.Task[None]) -> None:
            rounds.discard(round_)
            if not round_.cancelled() and (error := round_.exception()) is not None:
                # A bug, not an outage (those are counted): say so, keep probing.
                log.error("target %s: round failed", self.target, exc_info=error)

        return done

    async def consume(self) -> None:
        """Every stage judges what its reader brings, until cancelled."""
        transport = self.transport
        assert transport is not None, "connect() first"
        await asyncio.gather(
            *(stage.consume(self._readers.get(stage.name, transport)) for stage in self.stages)
        )

    def expire(self, now_ns: int) -> None:
        for stage in self.stages:
            stage.expire(now_ns)

    def pending_count(self) -> int:
        """Canaries acknowledged whose fate some stage has not decided yet."""
        return sum(stage.judge.pending_count() for stage in self.stages)

    async def settle(self, within: float) -> bool:
        """Wait until every acknowledged canary has its fate at every stage: arrivals
        as they come, `lost` once past its loss deadline. Gives up after ``within``
        seconds (then expires once more); whether nothing is left pending."""
        deadline = time.monotonic() + within
        # Stages that read another topic go on covering it: it may appear only now (a
        # mirror's, which MirrorMaker 2 creates once it has found the canary topic).
        next_refresh = time.monotonic() + SETTLE_REFRESH
        while self.pending_count() > 0 and time.monotonic() < deadline:
            self.expire(self._clock_ns())
            if self._readers and time.monotonic() >= next_refresh:
                await self.refresh()
                next_refresh = time.monotonic() + SETTLE_REFRESH
            await asyncio.sleep(0.02)
        self.expire(self._clock_ns())
        return self.pending_count() == 0

    async def expire_forever(self, period: float = 1.0) -> None:
        """The judges' clock: decide `lost` for canaries past their loss timeout."""
        while True:
            self.expire(self._clock_ns())
            await asyncio.sleep(period)

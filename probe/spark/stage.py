"""The sink stage as the probe runs it: Spark beside the asyncio probe, or on its own.

`run --stages consumer,sink` and `once --stages consumer,sink` start a local Spark
session (``sink.master``, default ``local[*]``) inside the probe process; `sla-probe
sink` runs only the sink (e.g. under ``spark-submit`` against a cluster, with
``sink.master: null``). Spark calls block, so they run in worker threads; findings
arrive on Spark's batch thread and go to the same recorders as the other stages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from prometheus_client import CollectorRegistry
from py4j.protocol import Py4JError

from probe.config import ProbeConfig, StageName, format_duration
from probe.core.canary import Canary, encode
from probe.core.errors import ConfigError, StageFailed, TransportError
from probe.core.judge import StreamKey
from probe.core.keys import KeyRing
from probe.core.restarts import RestartState, RestartStrategy, after_failure
from probe.metrics import ProbeMetrics
from probe.spark.health import SparkHealth, failure_reason, failure_summary
from probe.spark.lag import SourceLag
from probe.spark.session import starts_own_jvm, writable_spark_output
from probe.spark.sink import SinkFreshness, SinkJob, SinkSettings
from probe.stages.stage import Recorder
from probe.transport.kafka_settings import librdkafka_security

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from probe.stages.target import TargetProbe

log = logging.getLogger(__name__)

# What a call into Spark's JVM raises once the JVM is gone: py4j's errors, or the
# refused connection itself when py4j tries to reconnect.
JVM_GONE = (Py4JError, ConnectionError)

# How long `once` waits for its warm-up (the query's first batch) when
# sink.first_batch_timeout is unset: a smoke test must end. Spark's start (~8 s here)
# plus a first micro-batch of a Python source (~8-14 s); minutes on a cold cluster.
ONCE_FIRST_BATCH_TIMEOUT = 180.0
# The first batch with data starts the Python workers of the decoder and the judge.
WARMUP_TIMEOUT = 120.0
# How often a running query and Spark's JVM are checked: a dead query is seen within it.
WATCH_INTERVAL = 2.0
# How often the source lag is measured while no progress brings it (probe.spark.lag).
LAG_INTERVAL = 10.0


@dataclass(frozen=True)
class Ended:
    """Why a sink query is no longer running: the ``reason`` label of its restart
    (probe.metrics.sink.RESTART_REASONS) and the words for a log line or /readyz."""

    reason: str
    detail: str


def sink_settings(config: ProbeConfig, path: str) -> SinkSettings:
    kafka, sink = config.kafka, config.sink
    # The commands check this first (require_for_service; once has its broker).
    assert kafka.bootstrap_servers, "kafka.bootstrap_servers is required by the sink stage"
    return SinkSettings(
        bootstrap_servers=kafka.bootstrap_servers,
        topic=kafka.topic,
        path=path,
        target=config.target,
        probe_id=config.probe_id,
        freshness_s=sink.freshness,
        loss_timeout_s=max(config.judge.loss_timeout, sink.freshness),
        allowed_lateness_s=sink.allowed_lateness,
        trigger_s=sink.trigger,
        heartbeat_s=sink.heartbeat,
        max_records_per_batch=sink.max_records_per_batch,
        starting_offsets=sink.starting_offsets,
        max_size=config.canary.max_size,
        checkpoint=sink.checkpoint,
        # The driver reads kafka.sasl.password_file here, once, when the stage is set
        # up (a query restarted from its checkpoint keeps these settings: a rotated
        # password needs a restarted probe), and the executors get the password as an
        # option, as when it is inline: they never need the file, mounted in the
        # driver's pod only.
        kafka_options=librdkafka_security(kafka),
        source=sink.source,
    )


class SinkProgress:
    """Says on a terminal that the sink stage is starting, then that it is ready.

    Spark's start and the warm-up take ~25 s without a line from the probe. Only a
    terminal gets these notes: on a pipe or a log collector stderr stays the probe's
    JSON log lines. ``--json`` does not turn them off: they never reach stdout.
    """

    def __init__(
        self, stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._stream = sys.stderr if stream is None else stream
        self._clock = clock
        self._since = clock()
        self._shown = self._stream.isatty()
        self._say("starting Spark for the sink stage...")

    def ready(self) -> None:
        self._say(f"sink stage ready ({self._clock() - self._since:.0f}s)")

    def _say(self, note: str) -> None:
        if self._shown:
            self._stream.write(note + "\n")
            self._stream.flush()


class SparkSinkStage:
    """Owns the Spark session and the sink query for one Kafka target."""

    def __init__(
        self,
        config: ProbeConfig,
        keyring: KeyRing,
        recorders: Sequence[Recorder],
        *,
        metrics: ProbeMetrics | None = None,
        registry: CollectorRegistry | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
        short_run: bool = False,
    ) -> None:
        """``short_run``: the stage judges a few rounds and stops (`once`); its Spark,
        when launched here, starts for that (probe.spark.session.QUICK_JIT)."""
        self._short_run = short_run
        self._temp: tempfile.TemporaryDirectory[str] | None = None
        path = config.sink.path
        if path is None:
            # A smoke test must not resume an old run's checkpoint: a fresh directory.
            self._temp = tempfile.TemporaryDirectory(prefix="sla-sink-")
            path = self._temp.name
        self.settings = sink_settings(config, path)
        self.spark_output: str | None = None
        if starts_own_jvm():
            self.spark_output = writable_spark_output(config.sink.spark_log, path)
        elif config.sink.spark_log not in (None, "-"):
            log.warning("sink.spark_log ignored: Spark's output is spark-submit's here")
        self._config = config
        self._keyring = keyring
        self._recorders = recorders
        self._clock_ns = clock_ns
        self.freshness = SinkFreshness(clock_ns())
        self.health = (
            SparkHealth(
                registry,
                config.target,
                config.sink.trigger,
                clock_ns,
                skew_threshold_s=config.sink.skew_threshold_s,
                allowed_lateness_s=config.sink.allowed_lateness,
            )
            if registry is not None
            else None
        )
        if self.health is not None:
            s = self.settings
            self.health.lag = SourceLag(
                {
                    "bootstrap.servers": s.bootstrap_servers,
                    "topic": s.topic,
                    **{f"kafka.{name}": value for name, value in s.kafka_options.items()},
                },
                s.checkpoint_location,
                self.health.metrics.source_lag,
                every=LAG_INTERVAL,
            )
        if metrics is not None:
            metrics.declare_stage(config.target, StageName.SINK, self.freshness)
        self.job: SinkJob | None = None
        # The session Spark was started in, and whether this stage started it (then it
        # stops it too; a session it was handed, such as a test's, is left running).
        self._session: SparkSession | None = None
        self._owns_session = False
        # Starting (or restarting) and stopping run in worker threads: a stop waits for
        # a start under way, then stops what it started, and no start follows a stop.
        self._lifecycle = threading.Lock()
        self._stopped = False
        # Readiness: the first batch since the query (re)started committed.
        self.ready = False
        # Set while a restart waits for its delay, and once the strategy gave up.
        self.restarting: str | None = None
        self.given_up: str | None = None

    def watch(self, partitions: Sequence[int], probe_id: str) -> None:
        """Track staleness of partitions before their first canary lands in the sink."""
        now_ns = self._clock_ns()
        for partition in partitions:
            self.freshness.watch(StreamKey(probe_id, self._config.target, partition), now_ns)

    async def start(self) -> None:
        """Start Spark and the query, its source pinned at its starting offsets (the
        first start's ``starting_offsets``, kept in the checkpoint): canaries produced
        from now on are read. The query's first batch comes later (:meth:`first_batch`)."""
        await asyncio.to_thread(self._start_blocking)
        self._up(True)
        log.info(
            "sink query started: tables under %s, Spark's own output %s",
            self.settings.path,
            self.spark_output or "on stderr",
        )

    async def first_batch(
        self, within: float | None, stop: asyncio.Event | None = None
    ) -> Ended | None:
        """Wait for the started query's first batch: None once it committed (or on
        ``stop``); why not if the query ended first or ``within`` seconds (None: no bound)
        passed. A cold cluster starts its Python workers first: minutes."""
        assert self.job is not None, "start() first"
        job = self.job
        deadline = None if within is None else time.monotonic() + within
        while not await asyncio.to_thread(job.wait_for_batches, 1, WATCH_INTERVAL):
            if (ended := await asyncio.to_thread(self.ended)) is not None:
                return ended
            if stop is not None and stop.is_set():
                return None
            if deadline is not None and time.monotonic() > deadline:
                return Ended("start", f"sink query made no batch within {within:g}s")
        return None

    async def running(self, stop: asyncio.Event) -> Ended | None:
        """Watch the running query until ``stop`` (None) or until it ends (why)."""
        while not stop.is_set():
            if (ended := await asyncio.to_thread(self.ended)) is not None:
                self.ready = False
                self._up(False)
                return ended
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), WATCH_INTERVAL)
        return None

    async def supervise(self, target: TargetProbe, stop: asyncio.Event) -> None:
        """Run the sink beside ``target`` until ``stop``, restarting its query from the
        checkpoint each time it ends, with the restart strategy's delays, until the
        strategy gives up: the stage is then reported failed (``problem``, /readyz and
        ``synthetic_sla_spark_query_failed``) while the other stages go on.

        Settings errors (ConfigError) are not restarted: they end the probe.
        """
        strategy = RestartStrategy(**self._config.sink.restart.model_dump())
        state = RestartState()
        timeout = self._config.sink.first_batch_timeout
        lag = asyncio.create_task(self._measure_lag(stop))
        try:
            await self._supervise(target, stop, strategy, state, first_batch_within=timeout)
        finally:
            lag.cancel()

    async def _measure_lag(self, stop: asyncio.Event) -> None:
        """Keep the source lag measured, whatever the query does (probe.spark.lag)."""
        if self.health is None or self.health.lag is None:
            return
        lag = self.health.lag
        while not stop.is_set():
            await asyncio.to_thread(lag.refresh)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), lag.every)
        lag.close()

    async def _supervise(
        self,
        target: TargetProbe,
        stop: asyncio.Event,
        strategy: RestartStrategy,
        state: RestartState,
        *,
        first_batch_within: float | None,
    ) -> None:
        while not stop.is_set():
            began = time.monotonic()
            ended = await self._one_run(target, first_batch_within, stop)
            if ended is None:
                return
            ended = await self.named(ended)
            decision = after_failure(
                strategy,
                state,
                failed_at=time.monotonic(),
                ran_for=time.monotonic() - began,
                random=random.random,
            )
            state = decision.state
            if decision.delay is None:
                self.given_up = (
                    f"sink stage given up after {len(state.failures)} failures within "
                    f"{format_duration(strategy.failure_window)}; last: {ended.detail}"
                )
                log.error("%s", self.given_up)
                if self.health is not None:
                    self.health.metrics.failed()
                return
            if self.health is not None:
                self.health.metrics.restarted(ended.reason)
            self.restarting = ended.detail
            log.warning(
                "sink query ended (%s): %s; restarting it from its checkpoint in %.1fs",
                ended.reason, ended.detail, decision.delay,
            )  # fmt: skip
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), decision.delay)

    async def named(self, ended: Ended) -> Ended:
        """A query that could not read the topic (or start reading it), with the cause
        named when it is the connection: the executors' and the driver's clients say
        "broker transport failure" or time out, a connection of the probe's own names
        the certificate, the listener or the login, and the setting to change."""
        if ended.reason not in {"source", "start"}:
            return ended
        from probe.transport.kafka_connect_errors import cause_of  # noqa: PLC0415

        diagnosis = await cause_of(self._config.kafka, RuntimeError(ended.detail))
        if diagnosis is None:
            return ended
        return Ended(ended.reason, f"sink query cannot read the topic: {diagnosis.message}")

    async def _one_run(
        self, target: TargetProbe, within: float | None, stop: asyncio.Event
    ) -> Ended | None:
        """Start (or restart) the query, wait for its first batch, watch it: why it
        ended, or None on ``stop``."""
        first = self.job is None
        try:
            if first:
                await self.attach(target, within, stop)
            else:
                await self._restart()
                ended = await self.first_batch(within, stop)
                if ended is not None:
                    return ended
        except ConfigError:
            raise
        except TimeoutError as exc:  # the first batch or the warm-up: restarted
            return Ended("start", str(exc))
        except TransportError as exc:
            if self.job is None:
                # The query never started: its starting offsets could not be listed (a
                # partition without its leader yet, a broker away). Restarted like any
                # start; watching a query that does not exist would judge nothing and
                # read as ready.
                self._up(False)
                return Ended("start", str(exc))
            log.warning("sink stage: %s", exc)  # a warm-up canary the broker refused
        except Exception as exc:  # any start failure is restarted
            self._up(False)
            ended = await asyncio.to_thread(self.ended)  # a query that started, then failed
            return ended or Ended("start", f"{type(exc).__name__}: {exc}")
        self.restarting = None
        if stop.is_set():
            return None
        self.ready = True
        return await self.running(stop)

    async def _restart(self) -> None:
        assert self.job is not None
        await asyncio.to_thread(self._restart_blocking)
        self._up(True)
        log.info("sink query restarted from its checkpoint")

    def _restart_blocking(self) -> None:
        with self._lifecycle:
            self._refuse_after_stop()
            assert self.job is not None
            job = self.job
            with contextlib.suppress(*JVM_GONE):  # a dead query or JVM: nothing to stop
                job.stop()
            if not self._jvm_alive(job):
                # Local mode: the JVM was this process's child. A new one, a new job.
                from probe.spark.session import forget_session  # noqa: PLC0415

                forget_session()
                self._session = None
                self._launch()
                return
            job.start()

    @staticmethod
    def _jvm_alive(job: SinkJob) -> bool:
        """Whether the job's Spark context still answers (a round trip to the JVM)."""
        try:
            return not job.spark.sparkContext._jsc.sc().isStopped()
        except JVM_GONE:
            return False

    def _up(self, running: bool) -> None:
        if self.health is not None:
            self.health.metrics.up(running)

    def _start_blocking(self) -> None:
        with self._lifecycle:
            self._refuse_after_stop()
            self._launch()

    def _refuse_after_stop(self) -> None:
        if self._stopped:
            raise StageFailed("the sink stage is stopping")

    def _launch(self) -> None:
        """Spark's session (this stage's own unless one runs already) and the query.
        ``self.job`` is the started job: a start that fails leaves none."""
        from pyspark import SparkContext  # noqa: PLC0415 - Spark starts here

        from probe.spark.session import sink_session  # noqa: PLC0415

        if self._session is None:
            owns = SparkContext._active_spark_context is None
            self._session = sink_session(
                self._config.sink.master,
                spark_output=self.spark_output,
                spark_conf=self._config.sink.spark_conf,
                source=self._config.sink.source,
                short_run=self._short_run,
            )
            self._owns_session = owns
        job = SinkJob(
            self._session,
            self.settings,
            self._keyring,
            recorders=self._recorders,
            freshness=self.freshness,
            health=self.health,
            clock_ns=self._clock_ns,
        )
        job.start()
        self.job = job

    async def attach(
        self,
        target: TargetProbe,
        first_batch_timeout: float | None,
        stop: asyncio.Event | None = None,
    ) -> None:
        """Start beside a connected Kafka target: the query started (its source pinned,
        so canaries from now on are read), then warm-up canaries through the sink
        (see :meth:`warm_up`), which also makes its first batch.

        Raises what starting Spark raises (StageFailed, ConfigError), TimeoutError for
        a warm-up slower than ``first_batch_timeout`` (None for no bound: a cold
        cluster takes minutes), TransportError for a warm-up canary the broker did not
        take, StageFailed for a query that ended before its warm-up landed. The caller
        decides what each means for its job.
        """
        probe_id = target.own.probe_id
        self.watch(target.partitions, probe_id)
        await self.start()
        if target.partitions and target.transport is not None:
            await self.warm_up(
                target.transport.send, target.partitions, probe_id, first_batch_timeout, stop
            )

    async def warm_up(
        self,
        send: Callable[[int, bytes], Awaitable[int | None]],
        partitions: Sequence[int],
        probe_id: str,
        within: float | None = WARMUP_TIMEOUT,
        stop: asyncio.Event | None = None,
    ) -> None:
        """Send warm-up canaries under a probe id of their own through the sink, and
        wait until every one has landed (or ``stop``).

        The first batch that carries data also starts Spark's Python workers for the
        source, the decoder and the judge (~15 s here, more on a busy host, minutes on
        a cold cluster): canaries produced before that would be judged late for a cold
        start, not for the pipeline. One canary goes to each of as many partitions as
        a batch runs tasks in parallel, so every worker a steady batch uses is
        started. The warm-up streams are forgotten afterwards, so they never show up
        as silent. Raises TimeoutError after ``within`` seconds (None: no bound),
        StageFailed if the query ends first.
        """
        assert self.job is not None, "start() first"
        incarnation = self._clock_ns()
        keys = []
        for partition in list(partitions)[: self.job.tasks_per_batch]:
            warmup = Canary(
                probe_id=f"{probe_id}.warmup",
                incarnation=incarnation,
                target=self._config.target,
                partition=partition,
                seq=0,
                produced_ns=self._clock_ns(),
            )
            await send(partition, encode(warmup, self._keyring))
            keys.append(StreamKey(warmup.probe_id, warmup.target, partition))
        deadline = None if within is None else time.monotonic() + within
        checked = time.monotonic()
        # Commits happen on Spark's batch thread: its record of them shows the landing.
        while not all(key in self.freshness.staleness_ns(self._clock_ns()) for key in keys):
            if stop is not None and stop.is_set():
                return
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"warm-up canaries not through the sink in {within:g}s")
            if time.monotonic() - checked > WATCH_INTERVAL:
                checked = time.monotonic()
                if (ended := await asyncio.to_thread(self.ended)) is not None:
                    raise StageFailed(f"before its warm-up landed: {ended.detail}")
            await asyncio.sleep(0.1)
        for key in keys:
            self.freshness.forget(key)

    def hold(self) -> None:
        """Hold batches before they write until :meth:`resume` (a drill: a sink blocked
        on its storage). Ignored before the query started: its first batch positions
        the source, and holding it would only fail the start."""
        if self.job is None:
            log.warning("sink stage not started yet: hold ignored")
            return
        self.job.hold()
        log.warning("sink stage held: batches wait before writing until resumed")

    def resume(self) -> None:
        if self.job is not None:
            self.job.resume()
            log.warning("sink stage resumed")

    def ended(self) -> Ended | None:
        """Why the started query can no longer judge anything, or None while it runs:
        it failed, it was stopped, or Spark's JVM is gone (under spark-submit the JVM
        is this process's parent, and a signal to spark-submit stops only the JVM)."""
        if self.job is None or self.job.query is None:
            return None
        try:
            if self.job.query.isActive:
                return None
            failure = self.job.query.exception()
        except JVM_GONE as exc:
            return Ended("jvm", f"Spark's JVM is gone ({type(exc).__name__})")
        if failure is None:
            return Ended("stopped", "sink query stopped")
        text = str(failure)
        return Ended(failure_reason(text), f"sink query failed: {failure_summary(text)}")

    def problem(self) -> str | None:
        """Why the sink stage is not judging: given up, failed, restarting; None while
        it runs or has not started."""
        if self.given_up is not None:
            return self.given_up
        if self.restarting is not None:
            return f"restarting the sink query after: {self.restarting}"
        ended = self.ended()
        return None if ended is None else ended.detail

    def readiness(self) -> tuple[bool, str]:
        """For /readyz: ready once the query's first batch committed, while it runs."""
        problem = self.problem()
        if problem is not None:
            return False, problem
        if not self.ready:
            return False, "sink query starting (waiting for its first batch)"
        return True, "sink query running"

    async def stop(self) -> None:
        """Stop the query, wait for it to end, then stop the Spark session this stage
        started. In that order: a session stopped under a running query fails it (an
        INTERNAL_ERROR in Spark's log), and a process that exits with its query still
        running lets the JVM's shutdown do the same. A start under way is waited for
        and stopped in turn; no start or restart follows."""
        self._up(False)
        try:
            await asyncio.to_thread(self._stop_blocking)
        except JVM_GONE as exc:  # nothing left to stop
            log.warning("sink stop: Spark's JVM is gone (%s)", type(exc).__name__)
        if self._temp is not None:
            self._temp.cleanup()

    def _stop_blocking(self) -> None:
        with self._lifecycle:
            self._stopped = True
            if self.job is not None:
                self.job.stop()
            if self._session is not None and self._owns_session:
                self._session.stop()
                self._session = None

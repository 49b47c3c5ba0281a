"""The ``sink`` section: the Spark sink stage (where it writes, how often, its own
freshness and latency thresholds, its Kafka source, Spark's settings) and how `run`
restarts its query when it dies (``sink.restart``).

The sink's thresholds are its own, looser than the consumer's: a micro-batch stage adds
its trigger and batch time to the broker's latency.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from probe.config.base import _Section
from probe.config.durations import DAY, HOUR, Duration, _between


class RestartConfig(_Section):
    """How `run` restarts a sink query that died: from its checkpoint, after an
    exponentially growing delay, until failures come too fast.

    The defaults are Flink's for its recommended exponential-delay strategy (1 s
    doubling by 1.5 up to 1 min, 10 % jitter, reset after 1 h without a failure),
    plus a failure-rate cap: the 10th failure within 1 h gives the stage up (reported
    failed; the probe's other stages go on). `sla-probe sink` does not restart its
    query: it exits for its supervisor.
    """

    # The delay before the first restart after a failure.
    initial_delay: Annotated[Duration, _between(0.01, HOUR)] = 1.0
    # Each further failure multiplies the delay by this.
    multiplier: float = Field(default=1.5, ge=1.0, le=10.0)
    # The delay grows no longer than this.
    max_delay: Annotated[Duration, _between(0.01, DAY)] = 60.0
    # Each delay spread by this share either way, so restarts do not fall in step.
    jitter: float = Field(default=0.1, ge=0.0, le=1.0)
    # A query that ran this long without failing starts over at initial_delay.
    reset_after: Annotated[Duration, _between(1.0, 7 * DAY)] = HOUR
    # This many failures within failure_window give the stage up (reported failed).
    max_failures: int = Field(default=10, ge=1, le=10_000)
    # The window max_failures are counted in.
    failure_window: Annotated[Duration, _between(1.0, 7 * DAY)] = HOUR


# The sink's Kafka sources, by the name the setting takes.
SinkSource = Literal["sla_kafka", "kafka"]


class SinkConfig(_Section):
    """The Spark sink stage: canaries judged after Spark wrote them to a table."""

    # local[*] runs Spark inside the probe; null keeps what spark-submit configured.
    master: str | None = "local[*]"
    # Tables (canaries/, quarantine/, verdicts/) and, by default, the checkpoint live
    # under it; any Hadoop-compatible URI. `once` uses a fresh temporary one if unset.
    path: str | None = None
    # The query's checkpoint (offsets, commits, the judge's state); default
    # <path>/_checkpoint. Never deleted to get a query going: see docs/runbooks.md.
    checkpoint: str | None = None
    # How often a micro-batch starts (Spark's processing-time trigger).
    trigger: Annotated[Duration, _between(0.1, HOUR)] = 2.0
    # While no records come, a batch still runs this often (a heartbeat), so the judge's
    # loss timers fire and the watermark moves on while the topic is silent; while
    # records come, batches follow them and no other runs. Null: a batch every trigger,
    # records or not (Spark's batches without data: loss verdicts at the trigger's
    # precision, for about 0.3 core at 1,000 partitions). A checkpoint keeps the choice
    # it was first started with (see docs/spark-sink.md).
    heartbeat: Annotated[Duration | None, _between(0.1, HOUR)] = 10.0
    # The sink's own freshness deadline: a stream processor adds its trigger interval
    # and batch time to the broker's latency, so it gets a looser bound than judge.freshness.
    freshness: Annotated[Duration, _between(0.01, DAY)] = 30.0
    # The sink's latency SLO threshold (produce to sink commit): a histogram bucket sits
    # on it, and the rules read the sink's latency SLI there instead of at
    # metrics.latency_threshold, which a micro-batch stage cannot meet: a canary waits
    # up to one trigger for its batch, then the batch's run time. About two triggers
    # plus a batch by default.
    latency_threshold: Annotated[Duration, _between(0.001, HOUR)] = 5.0
    # The event-time watermark trails the newest canary by this much.
    allowed_lateness: Annotated[Duration, _between(1.0, DAY)] = 60.0
    # At most this many records a micro-batch reads (null: no bound), so a backlog is
    # worked off in batches of a bounded time.
    max_records_per_batch: int | None = Field(default=10_000, ge=1)
    # Where a query without a checkpoint starts reading the topic.
    starting_offsets: Literal["latest", "earliest"] = "latest"
    # What the sink and reconcile read Kafka with: the probe's own Python source
    # (sla_kafka, pip alone) or Spark's own connector (kafka: spark-sql-kafka-0-10, its
    # jars from `make spark-kafka`, or spark.jars.packages in spark_conf). The same
    # judge and tables behind either (probe/spark/kafka_connector.py).
    source: SinkSource = "sla_kafka"
    # Where Spark's own output goes (its JVM's log lines, its Python workers' prints),
    # appended, when the probe starts Spark itself; "-" leaves it on stderr. Unset:
    # spark.log in `path` when that is a local directory (`once`'s temporary one is
    # removed at exit), else discarded. Under spark-submit it stays spark-submit's.
    spark_log: str | None = Field(default=None, min_length=1)
    # Spark settings for the sink's session (spark.jars.packages, spark.hadoop.fs.s3a.*,
    # spark.driver.memory...). They win over spark-submit's --conf, which wins over the
    # probe's own defaults (see probe/spark/session.py).
    spark_conf: dict[Annotated[str, Field(pattern=r"^spark\.")], str] = Field(default_factory=dict)
    # How long the query may take to its first batch (a cold cluster starts its Python
    # workers first: minutes). Null: no bound; readiness stays false until then.
    first_batch_timeout: Annotated[Duration | None, _between(1.0, DAY)] = None
    # The watermark-skew SLO's threshold: good seconds are those with the skew below
    # it. Null: twice allowed_lateness (the watermark trails by allowed_lateness alone).
    skew_threshold: Annotated[Duration | None, _between(1.0, DAY)] = None
    restart: RestartConfig = RestartConfig()

    @property
    def skew_threshold_s(self) -> float:
        return self.skew_threshold if self.skew_threshold is not None else 2 * self.allowed_lateness

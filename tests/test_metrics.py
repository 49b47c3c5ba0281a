"""Metrics: names, zero series, scrape-time staleness, exposition formats, promtool lint."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)

from probe.config import load
from probe.core.canary import Canary
from probe.core.errors import ConfigError, ProduceFailure, RejectReason
from probe.core.judge import Fate, Judge, JudgePolicy, Outcome, OwnProbe, StreamKey
from probe.core.replicas import PartitionReplicas, TopicReplicas
from probe.embedded import EmbeddedBroker
from probe.endpoints import MetricsServer, build_app, exposition
from probe.metrics import (
    PartitionSeries,
    ProbeMetrics,
    latency_buckets,
    service_metrics,
    stale_after,
)
from tests.conftest import RunningProbe, Samples, parse_samples, run_args, sample, wait_for
from tests.core.test_replicas import recorded_topic

SECOND = 1_000_000_000
OWN = OwnProbe("p1", incarnation=1)


class Clock:
    def __init__(self) -> None:
        self.now_ns = 0

    def __call__(self) -> int:
        return self.now_ns


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return parse_samples(generate_latest(registry).decode())


def _stage(clock: Clock) -> tuple[CollectorRegistry, ProbeMetrics, Judge]:
    registry = CollectorRegistry()
    metrics = ProbeMetrics(registry, latency_thresholds=(0.5, 5.0), clock_ns=clock)
    judge = Judge(JudgePolicy(freshness_ns=5 * SECOND, loss_timeout_ns=60 * SECOND), own=OWN)
    metrics.declare_target("kafka")
    metrics.declare_stage("kafka", "consumer", judge)
    return registry, metrics, judge


def test_every_slo_series_exists_at_zero() -> None:
    registry, _, _ = _stage(Clock())
    samples = _samples(registry)
    for outcome in ("delivered", "late", "lost", "produce_failed"):
        key = (
            "synthetic_sla_canaries_total",
            (("outcome", outcome), ("stage", "consumer"), ("target", "kafka")),
        )
        assert samples[key] == 0
    for reason in RejectReason:
        assert sample(samples, "synthetic_sla_invalid_total", reason=reason.value) == 0
    assert (
        "synthetic_sla_e2e_latency_seconds_bucket",
        (("le", "0.5"), ("stage", "consumer"), ("target", "kafka")),
    ) in samples
    for name in ("duplicates", "out_of_order", "resurrected", "foreign"):
        assert (
            f"synthetic_sla_{name}_total",
            (("stage", "consumer"), ("target", "kafka")),
        ) in samples


def test_buckets_include_the_slo_thresholds() -> None:
    buckets = latency_buckets(0.3, 7.0)
    assert 0.3 in buckets
    assert 7.0 in buckets
    assert list(buckets) == sorted(buckets)


@pytest.mark.parametrize(
    ("stages", "sink", "sink_bucket"),
    [("consumer", None, False), ("consumer,sink", None, True), ("consumer", True, True)],
)
def test_the_sink_threshold_has_a_bucket_where_the_sink_runs(
    stages: str, sink: bool | None, sink_bucket: bool
) -> None:
    config = load(overrides={"stages": stages, "sink.latency_threshold": "7s"})
    registry, metrics = service_metrics(config, sink=sink)
    metrics.count(
        "kafka", "sink", [Fate(StreamKey("p1", "kafka", 0), 0, Outcome.DELIVERED, SECOND)]
    )
    bounds = {
        dict(labels)["le"]
        for name, labels in _samples(registry)
        if name == "synthetic_sla_e2e_latency_seconds_bucket"
    }
    assert "0.5" in bounds  # metrics.latency_threshold, always
    assert ("7.0" in bounds) is sink_bucket


def test_findings_move_the_counters() -> None:
    clock = Clock()
    registry, metrics, judge = _stage(clock)
    canary = Canary("p1", 1, "kafka", 0, 0, produced_ns=0)
    metrics.count("kafka", "consumer", judge.on_acked(canary, 1_000))
    metrics.count("kafka", "consumer", judge.on_arrived(canary, SECOND // 10))
    metrics.count("kafka", "consumer", judge.on_arrived(canary, SECOND // 5))
    metrics.count_invalid("kafka", "consumer", RejectReason.BAD_SIGNATURE)
    samples = _samples(registry)
    assert sample(samples, "synthetic_sla_canaries_total", outcome="delivered") == 1
    assert sample(samples, "synthetic_sla_duplicates_total") == 1
    assert sample(samples, "synthetic_sla_invalid_total", reason="bad_signature") == 1
    assert sample(samples, "synthetic_sla_e2e_latency_seconds_count") == 1
    assert sample(samples, "synthetic_sla_e2e_latency_seconds_sum") == 0.1


def test_a_future_dated_canary_is_counted_with_the_clocks_lead() -> None:
    registry, metrics, judge = _stage(Clock())
    samples = _samples(registry)
    assert sample(samples, "synthetic_sla_future_dated_total") == 0
    assert sample(samples, "synthetic_sla_clock_lead_seconds") == 0
    canary = Canary("p1", 1, "kafka", 0, 0, produced_ns=32 * SECOND)
    metrics.count("kafka", "consumer", judge.on_arrived(canary, 2 * SECOND))
    samples = _samples(registry)
    assert sample(samples, "synthetic_sla_future_dated_total") == 1
    assert sample(samples, "synthetic_sla_clock_lead_seconds") == 30.0
    assert sample(samples, "synthetic_sla_canaries_total", outcome="delivered") == 1
    assert sample(samples, "synthetic_sla_e2e_latency_seconds_sum") == 0.0


def test_staleness_rises_at_scrape_time_while_silent() -> None:
    clock = Clock()
    registry, _, judge = _stage(clock)
    judge.watch(StreamKey("p1", "kafka", 0), 0)
    clock.now_ns = 5 * SECOND
    assert sample(_samples(registry), "synthetic_sla_partition_staleness_seconds") == 5.0
    # No event in between: the value is computed from the clock when scraped.
    clock.now_ns = 90 * SECOND
    assert sample(_samples(registry), "synthetic_sla_partition_staleness_seconds") == 90.0
    canary = Canary("p1", 1, "kafka", 0, 0, produced_ns=89 * SECOND)
    judge.on_arrived(canary, 90 * SECOND)
    assert sample(_samples(registry), "synthetic_sla_partition_staleness_seconds") == 1.0


@pytest.mark.parametrize(
    ("mode", "partitions_with_a_series"),
    [(PartitionSeries.ALL, [0, 1, 2]), (PartitionSeries.STALE, [1, 2]), (PartitionSeries.NONE, [])],
)
def test_partition_series_follow_the_setting_and_the_aggregates_are_always_there(
    mode: PartitionSeries, partitions_with_a_series: list[int]
) -> None:
    clock = Clock()
    registry = CollectorRegistry()
    metrics = ProbeMetrics(
        registry, clock_ns=clock, partition_series=mode, stale_after_s={"consumer": 25.0}
    )
    judge = Judge(JudgePolicy(freshness_ns=5 * SECOND, loss_timeout_ns=60 * SECOND), own=OWN)
    metrics.declare_stage("kafka", "consumer", judge)
    for partition in (0, 1, 2):
        judge.watch(StreamKey("p1", "kafka", partition), 0)
    clock.now_ns = 100 * SECOND
    # Partition 0 is fresh (a canary of 90 s); 1 (staleness 30 s) and 2 (100 s) are stale.
    judge.on_arrived(Canary("p1", 1, "kafka", 0, 0, produced_ns=90 * SECOND), 91 * SECOND)
    judge.on_arrived(Canary("p1", 1, "kafka", 1, 0, produced_ns=70 * SECOND), 71 * SECOND)
    for body in (
        _samples(registry),
        parse_samples(exposition(registry, "")[0].decode()),
        _openmetrics_samples(exposition(registry, "application/openmetrics-text")[0]),
    ):
        per_partition = {
            int(dict(labels)["partition"]): value
            for (name, labels), value in body.items()
            if name == "synthetic_sla_partition_staleness_seconds"
        }
        assert sorted(per_partition) == partitions_with_a_series
        assert sample(body, "synthetic_sla_staleness_max_seconds", stage="consumer") == 100.0
        assert sample(body, "synthetic_sla_stale_partitions", stage="consumer") == 2


def _openmetrics_samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    assert body.endswith(b"# EOF\n")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in openmetrics_families(body.decode())
        for s in family.samples
    }


def test_stale_after_is_per_stage_from_the_config() -> None:
    config = load(overrides={"interval": "30s", "judge.freshness": "2s", "sink.freshness": "40s"})
    _, metrics = service_metrics(config, sink=True)
    judge = Judge(JudgePolicy(freshness_ns=SECOND, loss_timeout_ns=SECOND))
    metrics.declare_stage("kafka", "consumer", judge)
    metrics.declare_stage("kafka", "sink", judge)
    assert stale_after(30.0, 2.0) == 32.0
    thresholds = {s.stage: s.stale_after_ns for s in metrics.staleness.sources()}
    assert thresholds == {"consumer": 32 * SECOND, "sink": 70 * SECOND}


def test_a_bad_partition_series_setting_names_the_field() -> None:
    with pytest.raises(ConfigError) as caught:
        load(overrides={"metrics.partition_series": "some"})
    assert caught.value.field == "metrics.partition_series"


async def test_openmetrics_when_asked_and_readiness() -> None:
    registry, _, _ = _stage(Clock())
    ready = {"value": False}
    server = MetricsServer(build_app(registry, lambda: (ready["value"], "reason")), "127.0.0.1", 0)
    await server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(
                f"{base}/metrics", headers={"Accept": "application/openmetrics-text"}
            ) as reply:
                body = await reply.text()
                assert reply.headers["Content-Type"].startswith("application/openmetrics-text")
                assert body.rstrip().endswith("# EOF")
            async with session.get(f"{base}/metrics") as reply:
                assert reply.headers["Content-Type"].startswith("text/plain")
            async with session.get(f"{base}/healthz") as reply:
                assert reply.status == 200
            async with session.get(f"{base}/readyz") as reply:
                assert reply.status == 503
            ready["value"] = True
            async with session.get(f"{base}/readyz") as reply:
                assert reply.status == 200
    finally:
        await server.stop()


def _promtool_lint(text: str) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is installed by `make test` (Debian package prometheus)"
    return subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )


def test_promtool_finds_nothing_to_say_about_a_running_probe(
    broker: EmbeddedBroker,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
) -> None:
    probe = start_probe(*run_args(broker.bootstrap_servers, topic, key_file))
    wait_for(lambda: probe.canaries("delivered") >= 3, timeout=30, what="canaries delivered")
    with urllib.request.urlopen(f"http://127.0.0.1:{probe.port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    result = _promtool_lint(text)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""
    assert result.stderr.strip() == ""


def test_recorded_three_broker_metadata_becomes_per_broker_series() -> None:
    registry = CollectorRegistry()
    metrics = ProbeMetrics(registry)
    judge = Judge(JudgePolicy(freshness_ns=5 * SECOND, loss_timeout_ns=60 * SECOND), own=OWN)
    metrics.declare_target("kafka")
    metrics.declare_stage("kafka", "consumer", judge)
    topic = recorded_topic()
    metrics.target_replicas("kafka", topic)
    samples = _samples(registry)
    assert sample(samples, "synthetic_sla_brokers") == 3
    assert sample(samples, "synthetic_sla_partitions_offline") == 1
    assert sample(samples, "synthetic_sla_partitions_under_replicated") == 3
    assert sample(samples, "synthetic_sla_partitions_under_min_isr") == 2
    assert sample(samples, "synthetic_sla_min_insync_replicas") == 2
    assert sample(samples, "synthetic_sla_replication_factor") == 3
    assert sample(samples, "synthetic_sla_brokers_without_canary_leader") == 1
    led = {b: sample(samples, "synthetic_sla_broker_leader_partitions", broker=b) for b in "123"}
    assert led == {"1": 3, "2": 2, "3": 0}
    # Broker 3 is the one missing from the ISR of partitions 2, 4 and 5.
    assert _by(samples, "synthetic_sla_broker_replicas_out_of_sync", "broker") == {
        ("1",): 1,
        ("2",): 2,
        ("3",): 3,
    }
    assert _by(samples, "synthetic_sla_broker_info", "broker", "address", "listed") == {
        ("1", "kafka-1.kafka.svc:9092", "true"): 1,
        ("2", "kafka-2.kafka.svc:9092", "true"): 1,
        ("3", "kafka-3.kafka.svc:9092", "true"): 1,
    }
    # Partition 2 is offline: it has a problem, and no leader; never seen led, it is
    # named by its preferred leader (its first replica, 3), so a join still finds it.
    assert _by(samples, "synthetic_sla_partition_leader", "partition", "broker") == {
        ("0", "1"): 1,
        ("1", "2"): 1,
        ("2", "3"): 1,
        ("3", "1"): 1,
        ("4", "2"): 1,
        ("5", "1"): 1,
    }
    assert _by(
        samples, "synthetic_sla_partition_replica_problem", "partition", "leader", "problem"
    ) == {
        ("2", "none", "offline"): 1,
        ("4", "2", "under_replicated"): 1,
        ("5", "1", "under_min_isr"): 1,
    }
    for broker in "123":
        for reason in ProduceFailure:
            labels = {"broker": broker, "reason": reason.value}
            key = ("synthetic_sla_broker_produce_errors_total", _labels(target="kafka", **labels))
            assert samples[key] == 0
    # Every broker's outcome series exists at zero, the one leading nothing too.
    for broker in "123":
        key = (
            "synthetic_sla_broker_canaries_total",
            (("broker", broker), ("outcome", "lost"), ("stage", "consumer"), ("target", "kafka")),
        )
        assert samples[key] == 0
    # A fate counts against the broker that led its partition when it was produced.
    key = StreamKey("p1", "kafka", 4)
    metrics.count(
        "kafka",
        "consumer",
        [
            Fate(key, 0, Outcome.DELIVERED, SECOND // 10, broker=topic.leader_of(4)),
            Fate(key, 1, Outcome.LOST, None, broker=topic.leader_of(4)),
            Fate(key, 2, Outcome.DELIVERED, SECOND // 10),  # leader unknown: no broker series
        ],
    )
    samples = _samples(registry)
    assert sample(samples, "synthetic_sla_broker_canaries_total", broker="2") == 2
    assert sample(samples, "synthetic_sla_broker_canaries_total", broker="2", outcome="lost") == 1
    assert sample(samples, "synthetic_sla_broker_e2e_latency_seconds_count", broker="2") == 1
    assert sample(samples, "synthetic_sla_canaries_total", outcome="delivered") == 2
    # The mirror stage judges the mirror, not its canaries' source leaders: its fates
    # are counted per stage only, so a stopped mirror burns no broker's budget.
    metrics.declare_stage("kafka", "mirror", judge)
    metrics.count("kafka", "mirror", [Fate(key, 0, Outcome.LOST, None, broker=2)])
    samples = _samples(registry)
    assert sample(samples, "synthetic_sla_canaries_total", stage="mirror", outcome="lost") == 1
    assert not any(
        name.startswith("synthetic_sla_broker_") and ("stage", "mirror") in labels
        for name, labels in samples
    )


def _labels(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _by(samples: Samples, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    """The samples of ``name``, keyed by the values of ``labels``."""
    return {
        tuple(dict(sample_labels)[label] for label in labels): value
        for (sample_name, sample_labels), value in samples.items()
        if sample_name == name
    }


def _p(partition: int, leader: int | None, replicas: str, isr: str) -> PartitionReplicas:
    return PartitionReplicas(
        partition, leader, tuple(int(b) for b in replicas), tuple(int(b) for b in isr)
    )


def _topic(*partitions: PartitionReplicas, brokers: str, min_insync: int = 2) -> TopicReplicas:
    listed = frozenset(int(b) for b in brokers)
    return TopicReplicas(
        {p.partition: p for p in partitions},
        listed,
        min_insync,
        {b: f"kafka-{b}:9092" for b in listed},
    )


def test_eligible_leader_replicas_count_beside_the_isr() -> None:
    # KIP-966: brokers 2 and 3 stopped; broker 3 left the ISR of partition 0 while
    # it was under min ISR and is eligible (it holds every committed record), so the
    # acknowledged records of partition 0 are on two brokers, as min ISR promised;
    # partition 1's ISR shrank before ELR was kept, and nothing makes up for it.
    registry = CollectorRegistry()
    metrics = ProbeMetrics(registry)
    metrics.declare_target("kafka")
    partitions = {
        0: PartitionReplicas(0, 1, (1, 2, 3), (1,)),
        1: PartitionReplicas(1, 1, (1, 2, 3), (1,)),
    }
    topic = TopicReplicas(partitions, frozenset({1}), min_insync=2, eligible={0: (3,)})
    metrics.target_replicas("kafka", topic)
    samples = _samples(registry)
    assert sample(samples, "synthetic_sla_partitions_under_min_isr") == 2
    assert sample(samples, "synthetic_sla_partitions_under_min_isr_with_elr") == 1
    assert _by(samples, "synthetic_sla_broker_eligible_leader_replicas", "broker") == {
        ("1",): 0,
        ("2",): 0,
        ("3",): 1,
    }
    # Back in the ISR: no longer eligible, and the series say so.
    healed = TopicReplicas(
        {p: PartitionReplicas(p, 1, (1, 2, 3), (1, 2, 3)) for p in (0, 1)},
        frozenset({1, 2, 3}),
        min_insync=2,
    )
    metrics.target_replicas("kafka", healed)
    samples = _samples(registry)
    assert sample(samples, "synthetic_sla_partitions_under_min_isr_with_elr") == 0
    assert sample(samples, "synthetic_sla_broker_eligible_leader_replicas", broker="3") == 0


def test_the_replica_series_follow_the_metadata_and_none_linger() -> None:
    registry = CollectorRegistry()
    metrics = ProbeMetrics(registry)
    metrics.declare_target("kafka")
    problems = "synthetic_sla_partition_replica_problem"
    # Broker 3 is down: no longer listed, out of every ISR; partition 1 moved to 2.
    metrics.target_replicas(
        "kafka", _topic(_p(0, 1, "123", "12"), _p(1, 2, "321", "21"), brokers="12")
    )
    samples = _samples(registry)
    assert _by(samples, "synthetic_sla_broker_replicas_out_of_sync", "broker") == {
        ("1",): 0,
        ("2",): 0,
        ("3",): 2,
    }
    # Broker 3 holds replicas: still named, as down, with its address unknown (never
    # listed since this probe started).
    assert _by(samples, "synthetic_sla_broker_info", "broker", "address", "listed") == {
        ("1", "kafka-1:9092", "true"): 1,
        ("2", "kafka-2:9092", "true"): 1,
        ("3", "", "false"): 1,
    }
    assert _by(samples, problems, "partition", "leader", "problem") == {
        ("0", "1", "under_replicated"): 1,
        ("1", "2", "under_replicated"): 1,
    }
    # Broker 3 never seen before still gets its per-broker series, at zero.
    assert sample(samples, "synthetic_sla_broker_leader_partitions", broker="3") == 0
    assert (
        "synthetic_sla_broker_produce_errors_total",
        _labels(broker="3", reason="timeout", target="kafka"),
    ) in samples

    # Broker 3 is back and in sync: its problems are gone, its gauges at 0.
    metrics.target_replicas(
        "kafka", _topic(_p(0, 1, "123", "123"), _p(1, 3, "321", "321"), brokers="123")
    )
    samples = _samples(registry)
    assert _by(samples, problems, "partition") == {}
    assert _by(samples, "synthetic_sla_broker_replicas_out_of_sync", "broker") == {
        ("1",): 0,
        ("2",): 0,
        ("3",): 0,
    }
    assert _by(samples, "synthetic_sla_partition_leader", "partition", "broker") == {
        ("0", "1"): 1,
        ("1", "3"): 1,
    }

    # Broker 3 stops again, partition 1 (replicas on 3 alone now) goes offline: it is
    # still named by the broker that led it last, and broker 3 by the address it had.
    metrics.target_replicas(
        "kafka", _topic(_p(0, 1, "12", "12"), _p(1, None, "3", "3"), brokers="12")
    )
    samples = _samples(registry)
    assert _by(samples, "synthetic_sla_partition_leader", "partition", "broker") == {
        ("0", "1"): 1,
        ("1", "3"): 1,
    }
    assert (
        _by(samples, "synthetic_sla_broker_info", "broker", "address", "listed")[
            ("3", "kafka-3:9092", "false")
        ]
        == 1
    )

    # Broker 2 is decommissioned, its replicas moved away: its info series is gone,
    # its gauges are 0 and its counters stay.
    metrics.produce_failed("kafka", ProduceFailure.TIMEOUT, broker=2)
    metrics.target_replicas(
        "kafka", _topic(_p(0, 1, "13", "13"), _p(1, 3, "31", "31"), brokers="13")
    )
    samples = _samples(registry)
    assert _by(samples, "synthetic_sla_broker_info", "broker", "listed") == {
        ("1", "true"): 1,
        ("3", "true"): 1,
    }
    assert sample(samples, "synthetic_sla_broker_replicas_out_of_sync", broker="2") == 0
    assert sample(samples, "synthetic_sla_broker_leader_partitions", broker="2") == 0
    assert sample(samples, "synthetic_sla_broker_produce_errors_total", broker="2") == 1


def test_produce_errors_count_against_the_broker_that_led_the_partition() -> None:
    registry = CollectorRegistry()
    metrics = ProbeMetrics(registry)
    metrics.declare_target("kafka")
    metrics.target_replicas("kafka", _topic(_p(0, 1, "12", "12"), brokers="12"))
    metrics.produce_failed("kafka", ProduceFailure.NOT_ENOUGH_REPLICAS, broker=1)
    metrics.produce_failed("kafka", ProduceFailure.NOT_ENOUGH_REPLICAS, broker=1)
    metrics.produce_failed("kafka", ProduceFailure.TIMEOUT)  # leader unknown
    samples = _samples(registry)
    per_broker = "synthetic_sla_broker_produce_errors_total"
    assert sample(samples, per_broker, broker="1", reason="not_enough_replicas") == 2
    assert sample(samples, per_broker, broker="2") == 0
    assert sample(samples, per_broker, reason="timeout") == 0
    # The target's own counter counts every failure, the broker known or not.
    assert sample(samples, "synthetic_sla_produce_errors_total", reason="not_enough_replicas") == 2
    assert sample(samples, "synthetic_sla_produce_errors_total", reason="timeout") == 1


@pytest.mark.parametrize(
    ("mode", "leaders", "problems"),
    [
        (
            PartitionSeries.ALL,
            {0: "1", 1: "2", 2: "1", 3: "2"},
            {2: "under_replicated", 3: "offline"},
        ),
        (PartitionSeries.STALE, {1: "2", 2: "1", 3: "2"}, {2: "under_replicated", 3: "offline"}),
        (PartitionSeries.NONE, {}, {}),
    ],
)
def test_leader_and_problem_series_follow_the_partition_series_setting(
    mode: PartitionSeries, leaders: dict[int, str], problems: dict[int, str]
) -> None:
    clock = Clock()
    registry = CollectorRegistry()
    metrics = ProbeMetrics(
        registry, clock_ns=clock, partition_series=mode, stale_after_s={"consumer": 25.0}
    )
    judge = Judge(JudgePolicy(freshness_ns=5 * SECOND, loss_timeout_ns=60 * SECOND), own=OWN)
    metrics.declare_target("kafka")
    metrics.declare_stage("kafka", "consumer", judge)
    for partition in range(4):
        judge.watch(StreamKey("p1", "kafka", partition), 0)
    clock.now_ns = 100 * SECOND
    # 0: fresh and healthy; 1: stale and healthy; 2: fresh and under-replicated;
    # 3: stale and offline (named by its preferred leader, never seen led).
    for partition in (0, 2):
        canary = Canary("p1", 1, "kafka", partition, 0, produced_ns=90 * SECOND)
        judge.on_arrived(canary, 91 * SECOND)
    metrics.target_replicas(
        "kafka",
        _topic(
            _p(0, 1, "12", "12"),
            _p(1, 2, "21", "21"),
            _p(2, 1, "12", "1"),
            _p(3, None, "21", ""),
            brokers="12",
            min_insync=1,
        ),
    )
    for body in (
        _samples(registry),
        parse_samples(exposition(registry, "")[0].decode()),
        _openmetrics_samples(exposition(registry, "application/openmetrics-text")[0]),
    ):
        found = _by(body, "synthetic_sla_partition_leader", "partition", "broker")
        assert found == {(str(p), b): 1 for p, b in leaders.items()}
        found = _by(body, "synthetic_sla_partition_replica_problem", "partition", "problem")
        assert found == {(str(p), problem): 1 for p, problem in problems.items()}
        # Per broker, not per partition: in every mode.
        assert _by(body, "synthetic_sla_broker_info", "broker", "address") == {
            ("1", "kafka-1:9092"): 1,
            ("2", "kafka-2:9092"): 1,
        }
        assert _by(body, "synthetic_sla_broker_replicas_out_of_sync", "broker") == {
            ("1",): 1,
            ("2",): 2,
        }


def test_promtool_finds_nothing_to_say_about_the_replica_series() -> None:
    registry = CollectorRegistry()
    metrics = ProbeMetrics(registry)
    metrics.declare_target("kafka")
    metrics.target_replicas("kafka", recorded_topic())
    metrics.produce_failed("kafka", ProduceFailure.NOT_ENOUGH_REPLICAS, broker=1)
    text = exposition(registry, "")[0].decode()
    assert "synthetic_sla_partition_replica_problem{" in text
    result = _promtool_lint(text)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""
    assert result.stderr.strip() == ""

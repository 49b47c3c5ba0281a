"""Trace context where the ecosystem looks for it, against the real embedded broker.

An independent client (librdkafka, confluent-kafka) reads the canaries back: their
``traceparent`` header is a valid W3C context of the same trace as the signed copy
inside the canary. A header that disagrees with the signed copy is counted, and the
signed copy is what the stage follows.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from prometheus_client import CollectorRegistry

from probe import tracing
from probe.config import ProbeConfig, StageName, load
from probe.core.canary import decode
from probe.core.errors import ConfigError, RejectReason
from probe.core.judge import Fate, Finding, Outcome
from probe.core.keys import generate_key_ring
from probe.embedded import EmbeddedBroker
from probe.logs import JOIN_FIELDS, JsonFormatter
from probe.metrics import ProbeMetrics
from probe.services.report import Tally
from probe.stages.target import TargetProbe
from tests.conftest import until, wait_for


def _config(broker: EmbeddedBroker, topic: str, **extra: object) -> ProbeConfig:
    return load(
        overrides={
            "kafka.bootstrap_servers": broker.bootstrap_servers,
            "kafka.topic": topic,
            "kafka.create_topic": True,
            "kafka.partitions": 2,
            "kafka.fetch_max_wait": "20ms",
            "judge.loss_timeout": "10s",
            **extra,
        }
    )


def _read_back(broker: EmbeddedBroker, topic: str, partitions: int, count: int) -> list[Message]:
    """Every record of the topic from the start, by manual assignment (librdkafka's
    group join hangs on the embedded broker)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "trace-header-check",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records: list[Message] = []

    def more() -> bool:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            records.append(message)
        return len(records) >= count

    try:
        wait_for(more, timeout=15, what=f"{count} records from {topic}", every=0)
    finally:
        consumer.close()
    return records


def _headers(message: Message) -> dict[str, str]:
    return {name: (value or b"").decode() for name, value in message.headers() or []}


async def test_canaries_carry_their_trace_context_as_kafka_headers(
    broker: EmbeddedBroker, topic: str
) -> None:
    tracing.install_tracer_provider()
    keyring = generate_key_ring()
    tally = Tally("kafka")
    probe = TargetProbe(_config(broker, topic), keyring, [tally])
    await probe.connect(give_up_after=10)
    consumer = asyncio.create_task(probe.consume())
    try:
        await probe.produce_round()
        await until(lambda: probe.judge.pending_count() == 0, 10, "every fate")
    finally:
        consumer.cancel()
        await probe.close()
    assert tally.stages[StageName.CONSUMER].outcomes == {Outcome.DELIVERED.value: 2}

    records = await asyncio.to_thread(_read_back, broker, topic, 2, 2)
    for record in records:
        canary = decode(record.value() or b"", keyring)  # verified: signed copy
        header = _headers(record).get("traceparent")
        header_ids = tracing.ids_of(header)
        signed_ids = tracing.ids_of(canary.trace_context)
        assert header_ids is not None, f"no valid traceparent header: {record.headers()}"
        assert signed_ids is not None
        assert header_ids.trace_id == signed_ids.trace_id
        assert header == canary.trace_context  # the produce span's own context
        assert canary.partition == record.partition()


async def test_a_header_that_disagrees_with_the_signed_copy_is_counted_not_followed(
    broker: EmbeddedBroker, topic: str
) -> None:
    tracing.install_tracer_provider()
    keyring = generate_key_ring()
    registry = CollectorRegistry()
    metrics = ProbeMetrics(registry)
    probe = TargetProbe(_config(broker, topic), keyring, [metrics], metrics=metrics)
    await probe.connect(give_up_after=10)

    def mismatches() -> float:
        value = registry.get_sample_value(
            "synthetic_sla_trace_header_mismatch_total", {"target": "kafka", "stage": "consumer"}
        )
        assert value is not None, "the series exists from the start"
        return value

    assert mismatches() == 0
    consumer = asyncio.create_task(probe.consume())
    try:
        await probe.produce_round()
        await until(lambda: probe.judge.pending_count() == 0, 10, "every fate")
        assert mismatches() == 0
        original = (await asyncio.to_thread(_read_back, broker, topic, 2, 1))[0]
        forged = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
        # The same signed canary again, with a header claiming another trace.
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        producer.produce(
            topic,
            original.value(),
            partition=original.partition(),
            headers=[("traceparent", forged.encode())],
        )
        assert producer.flush(10) == 0
        await until(lambda: mismatches() == 1, 10, "the mismatch counted")
    finally:
        consumer.cancel()
        await probe.close()
    canary = decode(original.value() or b"", keyring)
    assert tracing.ids_of(canary.trace_context) != tracing.ids_of(forged)


def test_traceparents_are_parsed_strictly() -> None:
    good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert tracing.ids_of(good) == tracing.TraceIds(
        "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    )
    for bad in (
        None,
        "",
        good.upper(),
        "ff" + good[2:],
        "00-" + "0" * 32 + "-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-" + "0" * 16 + "-01",
        good + "-extra",
    ):
        assert tracing.ids_of(bad) is None, bad


def test_the_otlp_protocol_picks_the_exporter() -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter as GrpcExporter,
    )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter as HttpExporter,
    )

    assert isinstance(tracing.otlp_exporter({}), HttpExporter)  # the spec's default
    assert isinstance(
        tracing.otlp_exporter({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}), HttpExporter
    )
    assert isinstance(tracing.otlp_exporter({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}), GrpcExporter)
    # The traces-only variable wins over the general one.
    both = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
    }
    assert isinstance(tracing.otlp_exporter(both), GrpcExporter)
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL"):
        tracing.otlp_exporter({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})


def test_resource_defaults_yield_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    defaults = tracing.resource("probe-a", ["kafka", "mqtt"]).attributes
    assert defaults["service.name"] == "synthetic-sla-probe"
    assert defaults["sla.probe_id"] == "probe-a"
    assert defaults["sla.target"] == "kafka,mqtt"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "edge-probe")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "sla.probe_id=renamed,team=sre")
    chosen = tracing.resource("probe-a", ["kafka"]).attributes
    assert (chosen["service.name"], chosen["sla.probe_id"], chosen["team"]) == (
        "edge-probe",
        "renamed",
        "sre",
    )


# --- logs keyed for joins -------------------------------------------------------------


def _json_lines(caplog: pytest.LogCaptureFixture, needle: str) -> list[dict[str, object]]:
    formatter = JsonFormatter()
    return [
        json.loads(formatter.format(record))
        for record in caplog.records
        if needle in record.getMessage()
    ]


async def test_a_lost_canarys_log_line_carries_its_trace_id(
    broker: EmbeddedBroker, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    tracing.install_tracer_provider()
    findings = Fates()
    config = _config(broker, topic, **{"judge.freshness": "1s", "judge.loss_timeout": "1s"})
    probe = TargetProbe(config, generate_key_ring(), [findings])
    await probe.connect(give_up_after=10)
    caplog.set_level(logging.WARNING, logger="probe.stages.stage")
    # No consumer: every canary is acknowledged and never read back.
    try:
        await probe.produce_round()
        assert await probe.settle(5), "the loss timeout"
    finally:
        await probe.close()
    lost = [f for f in findings.fates if f.outcome is Outcome.LOST]
    assert len(lost) == 2
    lines = _json_lines(caplog, ": lost")
    assert len(lines) == 2
    for fate in lost:
        ids = tracing.ids_of(fate.trace_context)
        assert ids is not None
        (line,) = [entry for entry in lines if entry["partition"] == fate.key.partition]
        assert set(JOIN_FIELDS) <= set(line)
        assert line["trace_id"] == ids.trace_id
        assert isinstance(line["span_id"], str)
        assert len(line["span_id"]) == 16
        assert (line["outcome"], line["stage"], line["target"]) == ("lost", "consumer", "kafka")
        assert (line["topic"], line["seq"], line["probe_id"]) == (topic, 0, config.probe_id)
        assert str(line["produced_at"]).endswith("Z")


async def test_a_rejected_records_log_line_carries_its_header_context(
    broker: EmbeddedBroker, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The first rejection of a period is logged at once with its join fields; the
    rest of the period only in the summary (the rate limit holds)."""
    tracing.install_tracer_provider()
    tally = Tally("kafka")
    probe = TargetProbe(_config(broker, topic), generate_key_ring(), [tally])
    await probe.connect(give_up_after=10)
    caplog.set_level(logging.WARNING, logger="probe.stages.stage")
    consumer = asyncio.create_task(probe.consume())
    header = "00-" + "12" * 16 + "-" + "34" * 8 + "-01"
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        for _ in range(3):
            producer.produce(
                topic, b"not a canary", partition=1, headers=[("traceparent", header.encode())]
            )
        assert producer.flush(10) == 0
        await until(
            lambda: (
                StageName.CONSUMER in tally.stages
                and sum(tally.stages[StageName.CONSUMER].invalid.values()) == 3
            ),
            10,
            "three invalid records",
        )
    finally:
        consumer.cancel()
        await probe.close()
    (line,) = _json_lines(caplog, "invalid record on")
    assert (line["trace_id"], line["span_id"]) == ("12" * 16, "34" * 8)
    assert (line["outcome"], line["partition"], line["topic"]) == ("malformed", 1, topic)
    assert isinstance(line["offset"], int)
    assert line["seq"] is None


@dataclass
class Fates:
    fates: list[Fate] = field(default_factory=list)

    def count(self, target: str, stage: str, findings: Sequence[Finding]) -> None:
        self.fates.extend(f for f in findings if isinstance(f, Fate))

    def count_invalid(self, target: str, stage: str, reason: RejectReason) -> None:
        raise AssertionError(reason)


_UNRECORDED_CHECK = """
import json
from opentelemetry import trace
from probe import tracing
tracing.install_tracer_provider()
with tracing.produce_span(system="kafka", destination="t", partition=0, target="kafka",
                          probe_id="p", seq=0) as span:
    recording = span.span is not None and span.span.is_recording()
hop = tracing.Hop(stage="consumer", target="kafka", system="kafka", destination="t")
fate = tracing.record_fate(span.traceparent, hop, seq=0, canary_partition=0,
                           outcome="delivered", latency_s=0.01, arrived_ns=1)
print("RESULT", json.dumps({"traceparent": span.traceparent, "recording": recording,
                  "fate": [fate.trace_id, fate.span_id]}))
"""


@pytest.mark.parametrize(("exporter", "sampled"), [("none", 0), ("console", 1)])
def test_spans_are_built_only_when_something_receives_them(exporter: str, sampled: int) -> None:
    """No exporter: the canary still carries fresh valid ids, flagged not sampled,
    and its fate at a stage gets its own span id in the same trace; no span is built.
    An exporter: real spans, sampled."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_TRACES_EXPORTER"] = exporter
    done = subprocess.run(
        [sys.executable, "-c", _UNRECORDED_CHECK],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    # The console exporter prints its spans on stdout too.
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    seen = json.loads(line.removeprefix("RESULT "))
    ids = tracing.ids_of(seen["traceparent"])
    assert ids is not None
    assert int(seen["traceparent"][-2:], 16) & 1 == sampled  # W3C's sampled flag
    assert seen["recording"] is (exporter != "none")
    assert seen["fate"][0] == ids.trace_id
    assert seen["fate"][1] != ids.span_id
    assert tracing.ids_of(f"00-{seen['fate'][0]}-{seen['fate'][1]}-00") is not None

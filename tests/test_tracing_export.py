"""`sla-probe run` exporting traces by the standard OTEL_* variables, to a real OTLP
receiver (tests/otlp_receiver.py), and exemplars that point at those traces."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from probe.embedded import EmbeddedBroker, free_loopback_port
from tests.conftest import RunningProbe, run_args, sample, wait_for
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan

PRODUCER, CONSUMER = 4, 5  # OTLP span kinds


def _otel_env(endpoint: str, **extra: str) -> dict[str, str]:
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test",
        **extra,
    }


def _delivered_traces(receiver: OtlpReceiver) -> dict[str, tuple[ReceivedSpan, ReceivedSpan]]:
    """Traces holding a produce span and a consumer-stage arrival span, its child."""
    found = {}
    for trace_id, spans in receiver.traces().items():
        sends = [s for s in spans if s.name.startswith("send ") and s.kind == PRODUCER]
        receives = [s for s in spans if s.name.startswith("receive ") and s.kind == CONSUMER]
        for send in sends:
            for receive in receives:
                if receive.parent_span_id == send.span_id:
                    found[trace_id] = (send, receive)
    return found


def _exemplars(port: int) -> list[Sample]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/metrics",
        headers={"Accept": "application/openmetrics-text; version=1.0.0"},
    )
    with urllib.request.urlopen(request, timeout=2) as reply:
        text = reply.read().decode()
    return [
        s
        for family in text_string_to_metric_families(text)
        if family.name == "synthetic_sla_e2e_latency_seconds"
        for s in family.samples
        if s.exemplar is not None
    ]


def test_one_canary_is_one_trace_at_the_receiver_and_exemplars_point_at_it(
    broker: EmbeddedBroker,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
) -> None:
    with OtlpReceiver() as receiver:
        probe = start_probe(
            *run_args(broker.bootstrap_servers, topic, key_file), env=_otel_env(receiver.endpoint)
        )
        traces = wait_for(
            lambda: _delivered_traces(receiver), timeout=30, what="produce and arrival spans"
        )
        send, receive = next(iter(traces.values()))
        assert send.name == f"send {topic}"
        assert send.attributes["messaging.system"] == "kafka"
        assert send.attributes["messaging.destination.name"] == topic
        assert send.attributes["messaging.operation.type"] == "send"
        partition = send.attributes["messaging.destination.partition.id"]
        assert isinstance(send.attributes["messaging.kafka.offset"], int)
        assert receive.name == f"receive {topic}"
        assert receive.attributes["sla.stage"] == "consumer"
        assert receive.attributes["sla.outcome"] == "delivered"
        assert receive.attributes["messaging.destination.partition.id"] == partition
        assert isinstance(receive.attributes["sla.latency_s"], float)
        # Read back after it was sent (the read may come before the ack's callback).
        assert receive.start_ns >= send.start_ns
        resource = send.resource
        assert resource["service.name"] == "synthetic-sla-probe"
        assert resource["sla.probe_id"] == "probe-under-test"
        assert resource["sla.target"] == "kafka"
        assert resource["deployment.environment"] == "test"

        # Exemplars on the latency histogram name traces the receiver got.
        exemplars = wait_for(lambda: _exemplars(probe.port), timeout=10, what="exemplars")
        for exemplar_sample in exemplars:
            assert exemplar_sample.exemplar is not None
            trace_id = exemplar_sample.exemplar.labels["trace_id"]
            # The exemplar may be newer than the last batch the receiver got.
            wait_for(
                lambda t=trace_id: t in _delivered_traces(receiver),
                timeout=10,
                what=f"trace {trace_id} of an exemplar at the receiver",
            )
        probe.stop()


def test_grpc_export_reaches_a_grpc_collector(
    broker: EmbeddedBroker,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
) -> None:
    """OTEL_EXPORTER_OTLP_PROTOCOL=grpc: the same trace, over the collector's gRPC
    trace service."""
    with OtlpReceiver("grpc") as receiver:
        probe = start_probe(
            *run_args(broker.bootstrap_servers, topic, key_file),
            env=_otel_env(receiver.endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="grpc"),
        )
        traces = wait_for(
            lambda: _delivered_traces(receiver), timeout=30, what="produce and arrival spans"
        )
        send, receive = next(iter(traces.values()))
        assert (send.name, receive.name) == (f"send {topic}", f"receive {topic}")
        assert receive.attributes["sla.stage"] == "consumer"
        assert send.resource["service.name"] == "synthetic-sla-probe"
        probe.stop()


def test_a_dead_collector_drops_spans_not_canaries(
    broker: EmbeddedBroker,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
) -> None:
    nobody = f"http://127.0.0.1:{free_loopback_port()}"
    probe = start_probe(
        *run_args(broker.bootstrap_servers, topic, key_file),
        env=_otel_env(
            nobody,
            OTEL_EXPORTER_OTLP_TIMEOUT="1",
            OTEL_BSP_MAX_QUEUE_SIZE="4",
            OTEL_BSP_MAX_EXPORT_BATCH_SIZE="2",
        ),
    )
    assert sample(probe.metrics(), "synthetic_sla_spans_dropped_total") == 0

    def dropped_while_delivering() -> bool:
        samples = probe.metrics()
        return (
            sample(samples, "synthetic_sla_spans_dropped_total") > 0
            and sample(samples, "synthetic_sla_canaries_total", outcome="delivered") >= 6
        )

    wait_for(dropped_while_delivering, timeout=30, what="drops counted, canaries delivered")
    samples = probe.metrics()
    assert sample(samples, "synthetic_sla_canaries_total", outcome="lost") == 0
    assert sample(samples, "synthetic_sla_canaries_total", outcome="late") == 0
    # It still stops within its deadline, the collector gone.
    assert probe.stop() < 5

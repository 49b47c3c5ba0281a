"""Tracing: every canary carries the W3C trace context of the span that produced it.

The consumer, MQTT and bridge stages start an arrival span as a child of that
context, so a trace backend shows produce and arrival of one canary as one trace,
across protocols (MQTT to Kafka bridges). The Spark sink records no span yet: it
keeps each canary's context in its table (``trace_context``).

The SDK's tracer provider is always installed, so canaries always carry a valid
trace id (useful in logs even without a backend); spans are exported only when the
standard ``OTEL_TRACES_EXPORTER=console`` asks for it, or when a deployment
installs its own provider (e.g. OTLP) before the probe starts.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()
_TRACER_NAME = "synthetic_sla_probe"


def install_tracer_provider() -> None:
    """Install the SDK provider unless the process already has a real one."""
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    provider = TracerProvider()
    if os.environ.get("OTEL_TRACES_EXPORTER", "") == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)


@contextmanager
def produce_span(target: str, partition: int, seq: int) -> Iterator[str | None]:
    """A span around one canary's produce; yields the traceparent to put in the canary."""
    tracer = trace.get_tracer(_TRACER_NAME)
    with tracer.start_as_current_span(
        "canary produce",
        kind=trace.SpanKind.PRODUCER,
        attributes={"sla.target": target, "sla.partition": partition, "sla.seq": seq},
    ):
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
        yield carrier.get("traceparent")


def current_traceparent() -> str | None:
    """The traceparent of the current span, for carriers beside the canary's own copy
    (MQTT 5 user properties, which a bridge can map onto Kafka headers)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def record_arrival(
    trace_context: str | None, stage: str, target: str, partition: int, outcome: str
) -> None:
    """A zero-length consumer span, child of the canary's produce span."""
    if trace_context is None:
        return
    parent = _PROPAGATOR.extract({"traceparent": trace_context})
    tracer = trace.get_tracer(_TRACER_NAME)
    span = tracer.start_span(
        "canary arrival",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes={
            "sla.stage": stage,
            "sla.target": target,
            "sla.partition": partition,
            "sla.outcome": outcome,
        },
    )
    span.end()

"""Tracing: one trace per canary, across every hop it takes.

What a trace of one canary holds (all in the trace whose id the canary carries)::

    send <topic>        PRODUCER  the produce, from the send to the broker's ack
    ├─ receive <topic>  CONSUMER  arrival at the consumer stage (and the bridge, mqtt)
    ├─ commit <topic>   CONSUMER  the Spark sink: from the judging of its batch to the
    │                             commit of the batch's tables (the sink commit time)
    └─ lost <topic>     INTERNAL  zero-length, when a stage declares the canary lost

The Spark sink emits its spans on the driver, where the batch is committed, from the
context each canary carries into its table (``trace_context``).

Context travels where the ecosystem looks for it: the W3C ``traceparent`` (and
``tracestate``) as Kafka record headers and MQTT 5 user properties. The canary also
carries its own copy inside its signed payload, and that copy is the one stages trust:
a header that disagrees with it is counted
(``synthetic_sla_trace_header_mismatch_total``), never followed, since anyone who can
write to the topic can write headers.

Attributes follow OpenTelemetry's messaging semantic conventions
(``messaging.system``, ``messaging.destination.name``,
``messaging.destination.partition.id``, ``messaging.operation.type``,
``messaging.kafka.offset``), plus the probe's own under ``sla.*`` (stage, outcome,
latency, seq, the canary's partition).

A ``lost`` canary has no arrival to time, and its produce span ended long before the
loss was declared (an ended span takes no more events), so the declaration is a
zero-length span at the moment of the verdict, child of the produce span, with the
event ``canary.lost``: the trace then shows where the canary was last seen.

Export uses the standard variables: ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``,
``none``; unset means none here, so a probe without a collector logs no export
errors), ``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_PROTOCOL`` (``grpc`` or
``http/protobuf``, the default), ``OTEL_EXPORTER_OTLP_HEADERS``,
``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``,
``OTEL_BSP_*``. Spans leave through a batch processor with a bounded queue: ending a
span never waits on the collector, and a span the queue has no room for, or a batch
the collector did not take, is dropped and counted
(``synthetic_sla_spans_dropped_total{reason}``).

The SDK's tracer provider is always installed, so canaries always carry a valid
trace id (logs and exemplars use it) even when nothing is exported. While it has no
span processor (no exporter), no span is built at all: the ids are made (by the
provider's id generator) and propagated, flagged not sampled. Spans nobody reads were
a fifth of the probe's CPU at 10,000 partitions; and a context flagged sampled whose
spans were never kept would tell the pipeline's own tracing otherwise.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from opentelemetry import trace
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from probe.core.errors import ConfigError

log = logging.getLogger(__name__)

_PROPAGATOR = TraceContextTextMapPropagator()
_TRACER_NAME = "synthetic_sla_probe"
SERVICE_NAME = "synthetic-sla-probe"
# version-traceid-parentid-flags, lower-case hex; an all-zero id is invalid.
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")

# Why a span never reached the collector: the ``reason`` label values.
DROP_REASONS = ("queue_full", "export_failed")


@dataclass(frozen=True, slots=True)
class TraceIds:
    """A span's ids in lower-case hex, as OpenTelemetry's log correlation names them."""

    trace_id: str
    span_id: str


def ids_of(traceparent: str | None) -> TraceIds | None:
    """The trace and span ids of a W3C traceparent, or None if it is not a valid one.

    >>> ids_of("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    TraceIds(trace_id='0af7651916cd43dd8448eb211c80319c', span_id='b7ad6b7169203331')
    """
    match = _TRACEPARENT.match(traceparent or "")
    if match is None or match[1] == "ff":
        return None
    trace_id, span_id = match[2], match[3]
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return TraceIds(trace_id, span_id)


# -- export -------------------------------------------------------------------------


@dataclass
class ExportStats:
    """Spans dropped on their way to the collector, by reason; read at scrape time.

    ``queued`` mirrors the batch processor's queue: spans in, spans handed to the
    exporter out. The processor's deque drops one span for every span that enters it
    full, so that is counted as ``queue_full`` when it happens.
    """

    queued: int = 0
    _dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS, 0))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def entered_queue(self, capacity: int) -> None:
        with self._lock:
            if self.queued >= capacity:
                self._dropped["queue_full"] += 1
            else:
                self.queued += 1

    def left_queue(self, count: int) -> None:
        with self._lock:
            self.queued = max(0, self.queued - count)

    def export_failed(self, count: int) -> None:
        with self._lock:
            self._dropped["export_failed"] += count

    def dropped(self) -> dict[str, int]:
        with self._lock:
            return dict(self._dropped)


EXPORT_STATS = ExportStats()
"""This process's drop counts (``synthetic_sla_spans_dropped_total`` reads them)."""


class _CountingExporter(SpanExporter):
    """An exporter whose failed batches are counted as dropped spans."""

    def __init__(self, inner: SpanExporter, stats: ExportStats) -> None:
        self._inner = inner
        self._stats = stats

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self._stats.left_queue(len(spans))
        try:
            result = self._inner.export(spans)
        except Exception:  # an exporter must not kill the batch thread
            log.debug("span export raised", exc_info=True)
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self._stats.export_failed(len(spans))
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _CountingBatchProcessor(BatchSpanProcessor):
    """The SDK's batch processor, with its overflow counted (it only logs it)."""

    def __init__(self, exporter: SpanExporter, stats: ExportStats, capacity: int) -> None:
        super().__init__(_CountingExporter(exporter, stats), max_queue_size=capacity)
        self._stats = stats
        self._capacity = capacity

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        if context is not None and context.trace_flags.sampled:
            self._stats.entered_queue(self._capacity)
        super().on_end(span)


def otlp_exporter(environ: Mapping[str, str]) -> SpanExporter:
    """The OTLP exporter ``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL`` names; it reads its
    endpoint, headers and timeout from the environment itself."""
    protocol = environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    ).strip()
    # Imported here: only a process that exports pays for grpc.
    if protocol in ("", "http/protobuf"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter as HttpExporter,
        )

        return HttpExporter()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter()
    raise ConfigError(
        "OTEL_EXPORTER_OTLP_PROTOCOL", f"must be grpc or http/protobuf, got {protocol!r}"
    )


def _queue_size(environ: Mapping[str, str]) -> int:
    """``OTEL_BSP_MAX_QUEUE_SIZE``, default 2048: at most this many spans wait for the
    collector (about 10 KB each at most), whatever it does."""
    raw = environ.get("OTEL_BSP_MAX_QUEUE_SIZE", "").strip() or "2048"
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError("OTEL_BSP_MAX_QUEUE_SIZE", f"must be a positive integer, got {raw!r}")
    return int(raw)


def resource(probe_id: str, targets: Sequence[str]) -> Resource:
    """The probe's defaults (service name, probe id, targets), overridden by
    ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``."""
    defaults = Resource.create(
        {
            "service.name": SERVICE_NAME,
            "service.instance.id": probe_id,
            "sla.probe_id": probe_id,
            "sla.target": ",".join(targets),
        }
    )
    return defaults.merge(OTELResourceDetector().detect())


_processors: list[SpanProcessor] = []
# The provider install_tracer_provider made, if it made one.
_installed: list[TracerProvider] = []


def install_tracer_provider(
    probe_id: str = "", targets: Sequence[str] = (), environ: Mapping[str, str] | None = None
) -> None:
    """Install the SDK provider, exporting as the environment says, unless the process
    already has a real one. Raises ConfigError for an exporter it cannot build."""
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    environ = os.environ if environ is None else environ
    exporters = {
        name.strip()
        for name in environ.get("OTEL_TRACES_EXPORTER", "none").split(",")
        if name.strip() not in ("", "none")
    }
    unknown = exporters - {"otlp", "console"}
    if unknown:
        raise ConfigError(
            "OTEL_TRACES_EXPORTER", f"must be otlp, console or none, got {sorted(unknown)}"
        )
    processors: list[SpanProcessor] = []
    if "otlp" in exporters:
        processors.append(
            _CountingBatchProcessor(otlp_exporter(environ), EXPORT_STATS, _queue_size(environ))
        )
    if "console" in exporters:
        processors.append(SimpleSpanProcessor(ConsoleSpanExporter()))
    # No exit hook: shutdown() bounds the final flush, a dead collector must not hold
    # the process past its stop deadline.
    provider = TracerProvider(resource=resource(probe_id, targets), shutdown_on_exit=False)
    _installed[:] = [provider]
    _processors.clear()
    for processor in processors:
        export_to(processor)
    trace.set_tracer_provider(provider)


def export_to(processor: SpanProcessor) -> None:
    """Send the probe's spans to this processor too (an embedding application's, a
    test's); spans are built from then on."""
    if not _installed:
        raise RuntimeError("install_tracer_provider() first")
    _installed[0].add_span_processor(processor)
    _processors.append(processor)


def shutdown(timeout: float = 1.0) -> None:
    """Flush what is queued, for at most ``timeout`` seconds, and stop exporting."""
    for processor in _processors:
        if isinstance(processor, BatchSpanProcessor):
            # Its public shutdown() waits up to 30 s on an exporter that is retrying.
            processor._batch_processor.shutdown(timeout_millis=int(timeout * 1000))
        else:
            processor.shutdown()
    _processors.clear()


# -- spans --------------------------------------------------------------------------


class ProduceSpan:
    """The span of one canary's produce; ``carrier`` is its context to propagate."""

    def __init__(self, span: trace.Span | None, carrier: dict[str, str] | None = None) -> None:
        # span None: nothing is recorded, the carrier alone holds the ids.
        self.span = span
        if carrier is None:
            carrier = {}
            _PROPAGATOR.inject(carrier, trace.set_span_in_context(span or trace.INVALID_SPAN))
        self.carrier = carrier

    @classmethod
    def unrecorded(cls, ids: IdGenerator) -> ProduceSpan:
        """No span, only new ids (flagged not sampled), as a traceparent."""
        traceparent = f"00-{ids.generate_trace_id():032x}-{ids.generate_span_id():016x}-00"
        return cls(None, {"traceparent": traceparent})

    @property
    def traceparent(self) -> str | None:
        return self.carrier.get("traceparent")

    def acked(self, offset: int | None) -> None:
        if offset is not None and self.span is not None:
            self.span.set_attribute("messaging.kafka.offset", offset)

    def failed(self, reason: str) -> None:
        if self.span is None:
            return
        self.span.set_status(Status(StatusCode.ERROR, reason))
        self.span.set_attribute("error.type", reason)
        self.span.set_attribute("sla.outcome", "produce_failed")


_TRACER: list[tuple[trace.TracerProvider, trace.Tracer]] = []


def _tracer() -> trace.Tracer:
    """The probe's tracer from the current provider. The SDK builds a new tracer at
    every ``get_tracer`` call (a quarter of a span's cost at 10,000 partitions), so
    the last one is kept with its provider: a provider installed later gets its own."""
    provider = trace.get_tracer_provider()
    if not _TRACER or _TRACER[0][0] is not provider:
        _TRACER[:] = [(provider, provider.get_tracer(_TRACER_NAME))]
    return _TRACER[0][1]


def _ids_only() -> IdGenerator | None:
    """The id generator of the probe's own provider while no span goes anywhere (see
    the module docstring); None when spans are to be built."""
    if _processors or not _installed or trace.get_tracer_provider() is not _installed[0]:
        return None
    return _installed[0].id_generator


def exporting() -> bool:
    """Whether spans are built and go somewhere. When not, a canary's fate needs no
    span ids unless a log line names them, and a histogram no exemplar: it would point
    at a trace that no backend has."""
    return _ids_only() is None


@contextmanager
def produce_span(
    *, system: str, destination: str, partition: int, target: str, probe_id: str, seq: int
) -> Iterator[ProduceSpan]:
    """``send <destination>`` around one canary's produce, ended when the block ends
    (at the broker's acknowledgement, or the failure).

    Started, not made current: nothing inside reads the current span (the context
    travels explicitly), and attaching it cost a quarter of the span at 500 canaries
    a second.
    """
    ids_only = _ids_only()
    if ids_only is not None:
        yield ProduceSpan.unrecorded(ids_only)
        return
    span = _tracer().start_span(
        f"send {destination}",
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": system,
            "messaging.destination.name": destination,
            "messaging.destination.partition.id": str(partition),
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "sla.target": target,
            "sla.probe_id": probe_id,
            "sla.partition": partition,
            "sla.seq": seq,
        },
        record_exception=False,
    )
    try:
        yield ProduceSpan(span)
    finally:
        span.end()


@dataclass(frozen=True, slots=True)
class Hop:
    """Where a stage saw (or missed) a canary, for its span."""

    stage: str
    target: str
    system: str  # messaging.system of what the stage reads: kafka, mqtt
    destination: str  # the topic read
    partition: int | None = None  # the partition read (a bridge's may differ from the canary's)
    offset: int | None = None
    # What the stage does with an arrival, as messaging.operation.name (also the span's
    # name) and .type: a consumer's read is receive; the sink's commit processes it.
    operation: str = "receive"
    operation_type: str = "receive"


def record_fate(
    trace_context: str | None,
    hop: Hop,
    *,
    seq: int,
    canary_partition: int,
    outcome: str,
    latency_s: float | None,
    arrived_ns: int | None,
    ended_ns: int | None = None,
) -> TraceIds | None:
    """The span of a canary's fate at a stage, child of its produce span; its ids.

    An arrival (delivered, late) is ``receive <topic>`` (the hop's operation) from the
    moment the record was read to ``ended_ns``, by default now (the verdict); a
    declared loss is a zero-length ``lost <topic>`` at ``ended_ns`` with the event
    ``canary.lost``. None when the canary carries no valid context.
    """
    parent_ids = ids_of(trace_context)
    if parent_ids is None:
        return None
    ids_only = _ids_only()
    if ids_only is not None:
        return TraceIds(parent_ids.trace_id, f"{ids_only.generate_span_id():016x}")
    parent = _PROPAGATOR.extract({"traceparent": trace_context or ""})
    attributes: dict[str, str | int | float] = {
        "messaging.system": hop.system,
        "messaging.destination.name": hop.destination,
        "sla.stage": hop.stage,
        "sla.target": hop.target,
        "sla.outcome": outcome,
        "sla.seq": seq,
        "sla.partition": canary_partition,
    }
    if hop.partition is not None:
        attributes["messaging.destination.partition.id"] = str(hop.partition)
    if hop.offset is not None:
        attributes["messaging.kafka.offset"] = hop.offset
    if latency_s is not None:
        attributes["sla.latency_s"] = latency_s
    tracer = _tracer()
    now_ns = time.time_ns() if ended_ns is None else ended_ns
    if arrived_ns is not None:
        attributes["messaging.operation.type"] = hop.operation_type
        attributes["messaging.operation.name"] = hop.operation
        span = tracer.start_span(
            f"{hop.operation} {hop.destination}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            start_time=min(arrived_ns, now_ns),
        )
    else:
        span = tracer.start_span(
            f"{outcome} {hop.destination}",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=now_ns,
        )
        span.add_event(f"canary.{outcome}", {"sla.stage": hop.stage}, timestamp=now_ns)
        span.set_status(Status(StatusCode.ERROR, f"canary {outcome} at stage {hop.stage}"))
    span.end(end_time=now_ns)
    context = span.get_span_context()
    return TraceIds(trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id))


__all__ = [
    "DROP_REASONS",
    "EXPORT_STATS",
    "SERVICE_NAME",
    "ExportStats",
    "Hop",
    "ProduceSpan",
    "TraceIds",
    "ids_of",
    "install_tracer_provider",
    "otlp_exporter",
    "produce_span",
    "record_fate",
    "resource",
    "shutdown",
]

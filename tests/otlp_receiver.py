"""A small OTLP trace receiver for the tests, over HTTP or gRPC, decoding with the
official ``opentelemetry-proto`` bindings and service definitions (not the SDK's own
in-memory exporter), so what it sees is exactly what a collector would receive on the
wire."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import (
    TraceServiceServicer,
    add_TraceServiceServicer_to_server,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, object]
    events: tuple[str, ...]
    resource: dict[str, object]


def _value(value: AnyValue) -> object:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


class OtlpReceiver:
    """``with OtlpReceiver() as receiver``: listens on ``receiver.endpoint``, speaking
    ``protocol`` as ``OTEL_EXPORTER_OTLP_PROTOCOL`` names it."""

    def __init__(self, protocol: str = "http/protobuf") -> None:
        self._spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        self._grpc: grpc.Server | None = None
        if protocol == "grpc":
            self._grpc = grpc.server(ThreadPoolExecutor(max_workers=2))
            add_TraceServiceServicer_to_server(_TraceService(self), self._grpc)
            self._grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
            return
        assert protocol == "http/protobuf", protocol
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver._add(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        if self._grpc is not None:
            return f"http://127.0.0.1:{self._grpc_port}"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _add(self, request: ExportTraceServiceRequest) -> None:
        spans = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                spans.extend(_received(span, resource) for span in scope_spans.spans)
        with self._lock:
            self._spans.extend(spans)

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def traces(self) -> dict[str, list[ReceivedSpan]]:
        by_trace: dict[str, list[ReceivedSpan]] = {}
        for span in self.spans():
            by_trace.setdefault(span.trace_id, []).append(span)
        return by_trace

    def __enter__(self) -> OtlpReceiver:
        if self._grpc is not None:
            self._grpc.start()
        else:
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._grpc is not None:
            self._grpc.stop(grace=None)
            return
        self._server.shutdown()
        self._server.server_close()


class _TraceService(TraceServiceServicer):
    """The collector's gRPC trace service, as opentelemetry-proto defines it."""

    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(  # named by the service definition
        self, request: ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> ExportTraceServiceResponse:
        self._receiver._add(request)
        return ExportTraceServiceResponse()


def _received(span: Span, resource: dict[str, object]) -> ReceivedSpan:
    return ReceivedSpan(
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_span_id=span.parent_span_id.hex(),
        name=span.name,
        kind=span.kind,
        start_ns=span.start_time_unix_nano,
        end_ns=span.end_time_unix_nano,
        attributes={a.key: _value(a.value) for a in span.attributes},
        events=tuple(event.name for event in span.events),
        resource=resource,
    )

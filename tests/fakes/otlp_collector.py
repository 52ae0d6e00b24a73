"""A fake OpenTelemetry collector on 127.0.0.1: OTLP/HTTP traces, protobuf-encoded.

A chatgate process exports to it with ``OTEL_EXPORTER_OTLP_ENDPOINT=<collector.endpoint>``
(the exporter appends ``/v1/traces``). Every request is decoded with the protocol's own
``ExportTraceServiceRequest`` and flattened into :class:`CollectedSpan` records.
"""

from __future__ import annotations

import gzip
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from tests.fakes.loopback import LoopbackServer

PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True, slots=True)
class CollectedSpan:
    """One exported span, with its resource's attributes and ids in hex."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status: str  # UNSET, OK or ERROR
    events: tuple[str, ...]
    start_ns: int
    end_ns: int


class OtlpCollector(LoopbackServer):
    """Receives ``POST /v1/traces``; use as a context manager."""

    def __init__(self) -> None:
        super().__init__()
        self._spans: list[CollectedSpan] = []

    @property
    def endpoint(self) -> str:
        """The base URL for ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
        return f"http://127.0.0.1:{self.port}"

    def settings(self, *, delay_ms: int = 50) -> dict[str, str]:
        """The environment that makes chatgate export here, in batches every ``delay_ms``."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": str(delay_ms),
        }

    def routes(self, app: web.Application) -> None:
        """The OTLP/HTTP traces route."""
        app.router.add_post("/v1/traces", self._traces)

    def spans(self, name: str | None = None) -> list[CollectedSpan]:
        """The spans received so far (those named ``name``), in arrival order."""
        with self._lock:
            return [s for s in self._spans if name is None or s.name == name]

    def wait_until(
        self, done: Callable[[list[CollectedSpan]], bool], *, timeout: float = 20
    ) -> list[CollectedSpan]:
        """Block until ``done(spans)`` holds; return the spans."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.spans()
            if done(found):
                return found
            time.sleep(0.05)
        raise AssertionError(f"spans not as expected after {timeout}s: {self.spans()}")

    async def _traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        encoding = request.headers.get("Content-Encoding", "")
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        if request.content_type != PROTOBUF:
            return web.Response(status=415, text=f"expected {PROTOBUF}")
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        found = []
        for resource_spans in export.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        CollectedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes=_attributes(span.attributes),
                            resource=resource,
                            status=_STATUS.get(span.status.code, str(span.status.code)),
                            events=tuple(event.name for event in span.events),
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                        )
                    )
        with self._lock:
            self._spans.extend(found)
        self.record("export", {"spans": len(found)})
        response = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=response, content_type=PROTOBUF)


_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return None if kind is None else getattr(value, kind)

"""OpenTelemetry traces of a turn's steps, exported over OTLP/HTTP when configured.

Tracing is on when the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` variable is set (and ``OTEL_SDK_DISABLED`` is not
``true``). The SDK then reads the other standard variables itself: headers, timeouts,
``OTEL_SERVICE_NAME`` (default ``chatgate``), ``OTEL_RESOURCE_ATTRIBUTES`` and the batch
processor's ``OTEL_BSP_*``. Each process calls :func:`setup` once at start with its role
(``gateway``, ``run``, ``worker``), a resource attribute ``chatgate.role``, and
:func:`shutdown` at exit so the spans still queued are sent.

Without it nothing from OpenTelemetry is imported, not even the API: :func:`span` is a
no-op costing a couple of microseconds. The tracer is process-wide, like OpenTelemetry's own
provider (and like the logging configuration): one per process, set at start.

Spans, and their attributes (OpenTelemetry's ``gen_ai.*`` names where there is one):

    chatgate.turn          one per attempt at a turn: chatgate.turn.id,
                           chatgate.conversation.id, chatgate.platform,
                           chatgate.turn.attempt, chatgate.turn.queued, and at the end
                           chatgate.turn.status (done, failed, waiting)
      chatgate.model_call  chatgate.step, chatgate.replayed, gen_ai.request.model,
                           gen_ai.response.model, gen_ai.usage.input_tokens,
                           gen_ai.usage.output_tokens, chatgate.cost_usd
      chatgate.tool        chatgate.step, chatgate.replayed, gen_ai.tool.name,
                           gen_ai.tool.call.id, chatgate.tool.outcome (ok, error,
                           invalid_arguments, timeout, waiting, or denied: by policy,
                           by a person, expired or skipped)
      chatgate.reply       chatgate.step, chatgate.platform, chatgate.reply.resent

A turn that resumes after an approval, maybe hours later, is a new attempt and so a new
trace; chatgate.turn.id ties its attempts together. Tool arguments, tool output and
message text are never attributes: they may hold what a user or a secret wrote.

A step replayed from the journal (done before a crash or a suspension) is a span of no
duration with ``chatgate.replayed = true``. An exception that leaves a span is recorded
on it, and sets the span's status to error unless it is a control-flow ``Signal`` or a
cancellation (a drain, a lost lease).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Protocol, TypeAlias

from agent_core.errors import Signal
from agent_core.journaled import ModelCallOutput
from agent_core.model import ModelReply, ToolCallRequest
from agent_core.records import TurnRecord

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span as OtelSpan
    from opentelemetry.trace import Tracer

AttributeValue: TypeAlias = str | bool | int | float
Attributes: TypeAlias = Mapping[str, AttributeValue]

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
DEFAULT_SERVICE = "chatgate"


class Span(Protocol):
    """The open span of a step, as the code around the step sees it."""

    def set(self, attributes: Attributes) -> None:
        """Add (or overwrite) attributes, e.g. what the step found out."""
        ...

    def fail(self, description: str) -> None:
        """Mark the step as failed without an exception (a tool that answered an error)."""
        ...


class _Untraced:
    def set(self, attributes: Attributes) -> None:
        pass

    def fail(self, description: str) -> None:
        pass


class _Traced:
    __slots__ = ("_span",)

    def __init__(self, span: OtelSpan) -> None:
        self._span = span

    def set(self, attributes: Attributes) -> None:
        self._span.set_attributes(attributes)

    def fail(self, description: str) -> None:
        from opentelemetry.trace import StatusCode

        self._span.set_status(StatusCode.ERROR, description)


class _Tracing:
    __slots__ = ("provider", "tracer")

    def __init__(self) -> None:
        self.provider: TracerProvider | None = None
        self.tracer: Tracer | None = None


_UNTRACED = _Untraced()
_state = _Tracing()


def enabled(environ: Mapping[str, str]) -> bool:
    """Whether the environment asks for traces (an OTLP endpoint, the SDK not disabled)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def setup(environ: Mapping[str, str], *, role: str) -> bool:
    """Start exporting spans if ``environ`` (the process environment) asks for it.

    Imports the SDK and the OTLP/HTTP exporter only then; returns whether tracing is on.
    Calling it again while on does nothing."""
    if _state.provider is not None:
        return True
    if not enabled(environ):
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"chatgate.role": role})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        # Neither OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES named the service.
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE}))
    # Each process calls shutdown() itself: Celery's pool children end without atexit.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _state.provider = provider
    _state.tracer = provider.get_tracer("chatgate")
    return True


def shutdown() -> None:
    """Send the spans still queued and stop exporting (an unreachable collector delays
    this by at most ``OTEL_EXPORTER_OTLP_TIMEOUT``, 10 s by default)."""
    provider, _state.provider, _state.tracer = _state.provider, None, None
    if provider is not None:
        provider.shutdown()


@contextlib.contextmanager
def exporting(environ: Mapping[str, str], *, role: str) -> Iterator[bool]:
    """:func:`setup` for the life of a process's main function, then :func:`shutdown`."""
    try:
        yield setup(environ, role=role)
    finally:
        shutdown()


@contextlib.contextmanager
def span(name: str, attributes: Attributes) -> Iterator[Span]:
    """A span around the body, the current one inside it (its steps' spans are children)."""
    tracer = _state.tracer
    if tracer is None:
        yield _UNTRACED
        return
    with tracer.start_as_current_span(
        name, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as current:
        traced = _Traced(current)
        try:
            yield traced
        except BaseException as exc:
            current.record_exception(exc)
            if not isinstance(exc, Signal | asyncio.CancelledError):
                traced.fail(f"{type(exc).__name__}: {exc}")
            raise


def mark(name: str, attributes: Attributes) -> None:
    """A span of no duration: a step that did not run now (replayed, refused, waiting)."""
    with span(name, attributes):
        pass


def turn_attributes(turn: TurnRecord) -> Attributes:
    """A turn span's attributes, known when the attempt starts."""
    return {
        "chatgate.turn.id": turn.id,
        "chatgate.conversation.id": turn.conversation_id,
        "chatgate.platform": turn.conversation.platform,
        "chatgate.turn.attempt": turn.attempts + 1,
        "chatgate.turn.queued": turn.queued,
    }


def model_call_attributes(seq: int, model: str) -> Attributes:
    """A model call's attributes, known before the call."""
    return {"chatgate.step": seq, "chatgate.replayed": False, "gen_ai.request.model": model}


def model_reply_attributes(reply: ModelReply) -> Attributes:
    """What a model call answered with and cost."""
    return {
        "gen_ai.response.model": reply.model,
        "gen_ai.usage.input_tokens": reply.prompt_tokens,
        "gen_ai.usage.output_tokens": reply.completion_tokens,
        "chatgate.cost_usd": reply.cost_usd,
    }


def replayed_model_call_attributes(seq: int, output: ModelCallOutput) -> Attributes:
    """A model call's attributes from its journaled output."""
    attributes: dict[str, AttributeValue] = {"chatgate.step": seq, "chatgate.replayed": True}
    for name, value in (
        ("gen_ai.response.model", output.model),
        ("gen_ai.usage.input_tokens", output.prompt_tokens),
        ("gen_ai.usage.output_tokens", output.completion_tokens),
        ("chatgate.cost_usd", output.cost_usd),
    ):
        if value is not None:
            attributes[name] = value
    return attributes


def tool_attributes(
    call: ToolCallRequest, seq: int, *, outcome: str | None = None, replayed: bool = False
) -> Attributes:
    """A tool call's attributes; the outcome when it is known at the start."""
    attributes: dict[str, AttributeValue] = {
        "chatgate.step": seq,
        "chatgate.replayed": replayed,
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.id,
    }
    if outcome is not None:
        attributes["chatgate.tool.outcome"] = outcome
    return attributes


def reply_attributes(turn: TurnRecord, seq: int, *, resent: bool) -> Attributes:
    """A reply's delivery: where to, and whether an earlier attempt may have sent it."""
    return {
        "chatgate.step": seq,
        "chatgate.platform": turn.conversation.platform,
        "chatgate.reply.resent": resent,
    }

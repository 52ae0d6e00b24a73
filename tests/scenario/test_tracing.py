"""OpenTelemetry traces of a turn's steps: a real gateway exporting to a fake collector.

With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, each attempt at a turn is a ``chatgate.turn``
span whose children are its model calls, tool calls and reply; without it, nothing of
OpenTelemetry is even imported.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_core import tracing
from agent_core.errors import ModelError, Suspended
from tests.fakes.gateway import GatewayProcess, child_env, http
from tests.fakes.model_server import FakeModelServer, Scripted
from tests.fakes.otlp_collector import CollectedSpan, OtlpCollector
from tests.scenario.test_tool_crashes import _wait, tool_call

# About the tracing, not the storage: the SQLite pass runs it (tests/conftest.py).
pytestmark = pytest.mark.any_database


@pytest.fixture
def collector() -> Iterator[OtlpCollector]:
    """The fake collector the gateway exports to."""
    with OtlpCollector() as server:
        yield server


def _gateway(
    database_url: str, tmp_path: Path, model_server: FakeModelServer, **settings: str
) -> GatewayProcess:
    return GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        **model_server.settings(),
        **settings,
    )


def _turns(spans: list[CollectedSpan]) -> list[CollectedSpan]:
    return sorted((s for s in spans if s.name == "chatgate.turn"), key=lambda s: s.start_ns)


def _children(spans: list[CollectedSpan], parent: CollectedSpan) -> list[CollectedSpan]:
    found = [s for s in spans if s.parent_span_id == parent.span_id]
    assert all(s.trace_id == parent.trace_id for s in found)
    return sorted(found, key=lambda s: s.start_ns)


def test_a_turn_waiting_for_approval_and_its_resumption_are_two_traces(
    database_url: str,
    tmp_path: Path,
    model_server: FakeModelServer,
    collector: OtlpCollector,
) -> None:
    """Attempt 1: a model call and a tool call that waits for approval. Attempt 2, after
    Approve: the model call replayed from the journal, the tool run, a model call and the
    reply. Each attempt is a trace of its own carrying the turn's id."""
    model_server.script(tool_call("run_command", {"command": "echo traced"}), "It said traced.")
    gateway = _gateway(database_url, tmp_path, model_server, **collector.settings())
    try:
        gateway.start()
        accepted = gateway.post("ops", "say traced in a shell")
        conversation = str(accepted["conversation_id"])
        items = _wait(gateway, conversation, "approval")
        approval = next(i for i in items if i["role"] == "approval")["approval"]
        status, body = http(
            "POST", f"{gateway.url}/api/approvals/{approval['id']}", {"decision": "approve"}
        )
        assert status == 200, body
        _wait(gateway, conversation, "assistant")
        spans = collector.wait_until(
            lambda found: (
                [t.attributes.get("chatgate.turn.status") for t in _turns(found)]
                == ["waiting", "done"]
                and any(s.name == "chatgate.reply" for s in found)
            )
        )
    finally:
        gateway.stop()

    waited, resumed = _turns(spans)
    assert waited.trace_id != resumed.trace_id
    for turn in (waited, resumed):
        assert turn.parent_span_id == ""
        assert turn.status == "UNSET"
        assert turn.resource["service.name"] == "chatgate"
        assert turn.resource["chatgate.role"] == "gateway"
        assert turn.attributes == {
            "chatgate.turn.id": accepted["turn_id"],
            "chatgate.conversation.id": conversation,
            "chatgate.platform": "web",
            # Attempts count failures in a row; a suspension starts the count again.
            "chatgate.turn.attempt": 1,
            "chatgate.turn.queued": False,
            "chatgate.turn.status": turn.attributes["chatgate.turn.status"],
        }

    model_call, waiting = _children(spans, waited)
    assert (model_call.name, waiting.name) == ("chatgate.model_call", "chatgate.tool")
    assert model_call.attributes["chatgate.replayed"] is False
    assert model_call.attributes["gen_ai.request.model"] == "openai/fake-model"
    assert model_call.attributes["gen_ai.response.model"] == "fake-model"
    assert model_call.attributes["gen_ai.usage.input_tokens"] > 0
    assert model_call.attributes["gen_ai.usage.output_tokens"] > 0
    assert "chatgate.cost_usd" in model_call.attributes
    assert waiting.attributes == {
        "chatgate.step": 3,
        "chatgate.replayed": False,
        "gen_ai.tool.name": "run_command",
        "gen_ai.tool.call.id": "call_1",
        "chatgate.tool.outcome": "waiting",
    }

    replayed, ran, answered, reply = _children(spans, resumed)
    assert [s.name for s in (replayed, ran, answered, reply)] == [
        "chatgate.model_call",
        "chatgate.tool",
        "chatgate.model_call",
        "chatgate.reply",
    ]
    assert replayed.attributes["chatgate.replayed"] is True
    assert replayed.attributes["chatgate.step"] == model_call.attributes["chatgate.step"] == 1
    assert (
        replayed.attributes["gen_ai.usage.input_tokens"]
        == model_call.attributes["gen_ai.usage.input_tokens"]
    )
    assert ran.attributes["chatgate.tool.outcome"] == "ok"
    assert ran.attributes["chatgate.replayed"] is False
    assert ran.end_ns > ran.start_ns
    assert answered.attributes["chatgate.replayed"] is False
    assert answered.attributes["chatgate.step"] == 4
    assert reply.attributes == {
        "chatgate.step": 5,
        "chatgate.platform": "web",
        "chatgate.reply.resent": False,
    }
    assert all(s.status == "UNSET" for s in spans)


def test_a_failed_model_call_is_an_error_span_with_the_exception(
    database_url: str,
    tmp_path: Path,
    model_server: FakeModelServer,
    collector: OtlpCollector,
) -> None:
    """The model answers 500: its span has error status and the exception recorded; the
    turn still ends (the user is told) and says it failed."""
    model_server.script(Scripted(status=500), Scripted(status=500))
    gateway = _gateway(database_url, tmp_path, model_server, **collector.settings())
    try:
        gateway.start()
        accepted = gateway.post("ops", "hello?")
        _wait(gateway, str(accepted["conversation_id"]), "system")
        spans = collector.wait_until(lambda found: bool(_turns(found)))
    finally:
        gateway.stop()
    (turn,) = _turns(spans)
    assert turn.attributes["chatgate.turn.status"] == "failed"
    model_call, reply = _children(spans, turn)
    assert (model_call.name, model_call.status, model_call.events) == (
        "chatgate.model_call",
        "ERROR",
        ("exception",),
    )
    assert reply.name == "chatgate.reply"


def test_spans_still_queued_are_sent_when_the_gateway_stops(
    database_url: str,
    tmp_path: Path,
    model_server: FakeModelServer,
    collector: OtlpCollector,
) -> None:
    """Batches every ten minutes: nothing is sent while the gateway runs; SIGTERM sends the
    turn's spans before the process exits. OTEL_SERVICE_NAME names the service."""
    settings = collector.settings(delay_ms=600_000) | {"OTEL_SERVICE_NAME": "chatgate-eu"}
    gateway = _gateway(database_url, tmp_path, model_server, **settings)
    try:
        gateway.start()
        accepted = gateway.post("ops", "hi")
        gateway.wait_for_replies(str(accepted["conversation_id"]), 1)
        time.sleep(0.3)
        assert collector.spans() == []
        assert gateway.terminate() == 0, gateway.log
    finally:
        gateway.stop()
    names = sorted(s.name for s in collector.spans())
    assert names == ["chatgate.model_call", "chatgate.reply", "chatgate.turn"]
    assert {s.resource["service.name"] for s in collector.spans()} == {"chatgate-eu"}


NOT_CONFIGURED = """
import asyncio, json, os, sys

from agent_core import tracing
from agent_core.events import InboundMessage
from agent_core.model import ModelReply, ToolCallRequest
from agent_core.settings_loader import load_settings
from agent_core.storage.database import open_database
from agent_core.storage.store import Store
from agent_core.testing import RecordingOutbound, ScriptedModel
from gateway.app import build_app
from workers.bootstrap import build_core


async def main(url):
    on = tracing.setup(os.environ, role="gateway")
    settings = load_settings({"CHATGATE_DATABASE_URL": url})
    build_app(settings)
    call = ToolCallRequest(id="c1", name="list_schedules", arguments="{}")
    model = ScriptedModel(ModelReply(text="", model="m", tool_calls=(call,)), "none")
    async with open_database(url) as database:
        store = Store(database)
        core = build_core(
            settings, store, outbound=RecordingOutbound(), model=model, sandbox=None
        )
        message = InboundMessage(
            platform="web", workspace="local", channel="c", user="web:local", text="any?",
            platform_event_id="1",
        )
        accepted = await store.accept_inbound(message)
        status = await core.runner.run_turn(await store.start_turn(accepted.turn_id))
    tracing.shutdown()
    loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
    print(json.dumps([on, status, len(model.prompts), loaded]))


asyncio.run(main(sys.argv[1]))
"""


def test_without_an_endpoint_nothing_of_opentelemetry_is_imported(database_url: str) -> None:
    """No OTEL_EXPORTER_OTLP_ENDPOINT: a turn with a tool call runs through the gateway's
    wiring and neither the SDK nor even the API is imported."""
    env = {k: v for k, v in child_env().items() if not k.startswith("OTEL_EXPORTER_OTLP_")} | {
        "OTEL_SERVICE_NAME": "set-but-not-enough"
    }
    done = subprocess.run(
        [sys.executable, "-c", NOT_CONFIGURED, database_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    on, status, model_calls, loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert (on, status, model_calls, loaded) == (False, "done", 2, [])


def test_either_endpoint_variable_turns_tracing_on_and_sdk_disabled_off() -> None:
    """The switch: either endpoint variable turns it on, OTEL_SDK_DISABLED=true off."""
    assert not tracing.enabled({})
    assert not tracing.enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": " "})
    assert tracing.enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing.enabled({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x/v1/traces"})
    assert not tracing.enabled(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}
    )


async def test_failures_are_errors_and_signals_and_cancellations_are_not(
    collector: OtlpCollector, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception leaving a span is recorded on it; only a failure sets error status (a
    Suspended turn or a cancelled task did not fail). shutdown() sends what is queued."""
    for name, value in collector.settings(delay_ms=600_000).items():
        monkeypatch.setenv(name, value)
    assert tracing.setup(os.environ, role="test")

    async def cancelled() -> None:
        with tracing.span("cancelled", {}):
            await asyncio.sleep(60)

    try:
        with pytest.raises(ModelError), tracing.span("failed", {"k": 1}):
            raise ModelError("no model")
        with pytest.raises(Suspended), tracing.span("suspended", {}):
            raise Suspended(7)
        task = asyncio.create_task(cancelled())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with tracing.span("parent", {}) as parent:
            tracing.mark("child", {"chatgate.replayed": True})
            parent.fail("timeout")
    finally:
        tracing.shutdown()
    spans = {s.name: s for s in collector.spans()}
    assert {name: (s.status, s.events) for name, s in spans.items()} == {
        "failed": ("ERROR", ("exception",)),
        "suspended": ("UNSET", ("exception",)),
        "cancelled": ("UNSET", ("exception",)),
        "child": ("UNSET", ()),
        "parent": ("ERROR", ()),
    }
    assert spans["failed"].attributes == {"k": 1}
    assert spans["child"].parent_span_id == spans["parent"].span_id
    assert spans["child"].trace_id == spans["parent"].trace_id
    assert spans["failed"].resource["chatgate.role"] == "test"
    with tracing.span("after shutdown", {}) as untraced:
        untraced.set({"ignored": True})

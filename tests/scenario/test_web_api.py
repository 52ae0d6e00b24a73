"""The gateway in-process: web chat API, real litellm against the fake model server."""

from __future__ import annotations

import asyncio
import io
import json
import time
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.fakes.model_server import FakeModelServer, Scripted
from tests.scenario.conftest import ClientFactory

Client = TestClient[Any, Any]


async def _post(client: Client, conversation: str, text: str, **extra: Any) -> dict[str, Any]:
    response = await client.post(
        "/api/messages", json={"conversation": conversation, "text": text, **extra}
    )
    assert response.status == 202, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def _items(client: Client, conversation_id: str) -> list[dict[str, Any]]:
    response = await client.get(f"/api/conversations/{conversation_id}/messages")
    assert response.status == 200
    return list((await response.json())["items"])


async def _replies(
    client: Client, conversation_id: str, count: int, timeout: float = 20
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        items = await _items(client, conversation_id)
        if sum(item["role"] != "user" for item in items) >= count:
            return items
        assert time.monotonic() < deadline, f"{count} replies not seen: {items}"
        await asyncio.sleep(0.05)


async def test_a_message_gets_the_models_reply(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    """system prompt + message go through litellm to the model; its reply is stored in order."""
    model_server.script("Hello from the model")
    client = await make_client(model_server)
    accepted = await _post(client, "general", "hi there")
    items = await _replies(client, accepted["conversation_id"], 1)
    assert [(i["role"], i["text"]) for i in items] == [
        ("user", "hi there"),
        ("assistant", "Hello from the model"),
    ]
    request = model_server.requests[0]
    assert request["model"] == "fake-model"
    assert request["messages"][0]["role"] == "system"
    assert request["messages"][-1] == {"role": "user", "content": "hi there"}


async def test_the_same_event_twice_makes_one_turn(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    """A resend with the same id is acknowledged as a duplicate and runs nothing."""
    client = await make_client(model_server)
    first = await _post(client, "general", "once", id="client-1")
    second = await _post(client, "general", "once", id="client-1")
    assert second["duplicate"]
    assert not first["duplicate"]
    assert second["turn_id"] == first["turn_id"]
    await _replies(client, first["conversation_id"], 1)
    await asyncio.sleep(0.3)
    assert len(model_server.requests) == 1
    assert len(await _items(client, first["conversation_id"])) == 2


async def test_two_messages_are_answered_in_order(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    """The second waits for the first; its prompt holds the first answer."""
    model_server.script(Scripted(text="first answer", delay=0.5), "second answer")
    client = await make_client(model_server)
    one = await _post(client, "ordered", "question one")
    await _post(client, "ordered", "question two")
    items = await _replies(client, one["conversation_id"], 2)
    assistant = [i["text"] for i in items if i["role"] == "assistant"]
    assert assistant == ["first answer", "second answer"]
    assert model_server.max_in_flight == 1
    contents = [m["content"] for m in model_server.requests[1]["messages"][1:]]
    assert contents == ["question one", "first answer", "question two"]


async def test_twenty_conversations_run_concurrently(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    """Twenty conversations' model calls are in flight at the same time."""
    model_server.hold_until(20, timeout=15)
    client = await make_client(model_server)
    accepted = await asyncio.gather(*(_post(client, f"c{i}", f"hello {i}") for i in range(20)))
    for index, body in enumerate(accepted):
        items = await _replies(client, body["conversation_id"], 1, timeout=30)
        assert items[-1]["text"] == f"echo: hello {index}"
    assert model_server.max_in_flight == 20


async def test_concurrency_is_bounded_by_the_setting(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    """CHATGATE_MAX_CONCURRENT_TURNS caps turns in flight across conversations."""
    model_server.script(*(Scripted(text="ok", delay=0.2) for _ in range(8)))
    client = await make_client(model_server, CHATGATE_MAX_CONCURRENT_TURNS="3")
    accepted = await asyncio.gather(*(_post(client, f"b{i}", "go") for i in range(8)))
    for body in accepted:
        await _replies(client, body["conversation_id"], 1)
    assert model_server.max_in_flight == 3


async def test_bad_input_gets_a_clear_4xx_and_stores_nothing(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    """Malformed bodies 400, over 1 MiB 413, unknown ids 404: never 500, nothing stored."""
    client = await make_client(model_server)
    cases: list[tuple[bytes, int]] = [
        (b"{not json", 400),
        (b"\xff\xfe\x00", 400),
        (b"[]", 400),
        (b'"text"', 400),
        (b"{}", 400),
        (json.dumps({"conversation": "c", "text": ""}).encode(), 400),
        (json.dumps({"conversation": "c", "text": 5}).encode(), 400),
        (json.dumps({"conversation": "", "text": "x"}).encode(), 400),
        (json.dumps({"conversation": "c", "text": "x", "user": "bad user!"}).encode(), 400),
        (json.dumps({"conversation": "c", "text": "x", "id": ""}).encode(), 400),
        (json.dumps({"conversation": "c", "text": "x" * 40_000}).encode(), 400),
        (json.dumps({"conversation": "c", "text": "x" * (1024 * 1024)}).encode(), 413),
    ]
    for body, status in cases:
        response = await client.post(
            "/api/messages", data=io.BytesIO(body), headers={"Content-Type": "application/json"}
        )
        assert response.status == status, (body[:40], response.status)
        assert "error" in await response.json()
    good_body = json.dumps({"conversation": "c", "text": "x"})
    form = await client.post(
        "/api/messages", data=good_body, headers={"Content-Type": "text/plain"}
    )
    assert form.status == 415
    cross = await client.post(
        "/api/messages",
        data=good_body,
        headers={"Content-Type": "application/json", "Origin": "https://evil.example"},
    )
    assert cross.status == 403
    rebound = await client.get("/api/conversations", headers={"Host": "evil.example:8080"})
    assert rebound.status == 403
    assert (await client.get("/api/conversations/nope/messages")).status == 404
    assert (await client.get("/api/conversations/nope/stream")).status == 404
    good = await _post(client, "c", "fine")
    bad_after = await client.get(f"/api/conversations/{good['conversation_id']}/messages?after=x")
    assert bad_after.status == 400
    conversations = await (await client.get("/api/conversations")).json()
    assert [c["name"] for c in conversations] == ["c"]
    items = await _replies(client, good["conversation_id"], 1)
    assert [i["role"] for i in items] == ["user", "assistant"]


async def test_health_readiness_and_metrics(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    """healthz and readyz answer 200; metrics count the inbound event and the turn."""
    client = await make_client(model_server)
    assert (await client.get("/healthz")).status == 200
    ready = await client.get("/readyz")
    assert ready.status == 200
    assert (await ready.json())["ready"] is True
    accepted = await _post(client, "m", "count me", id="m-1")
    await _post(client, "m", "count me", id="m-1")
    await _replies(client, accepted["conversation_id"], 1)
    await asyncio.sleep(0.1)
    text = await (await client.get("/metrics")).text()
    assert 'chatgate_inbound_events_total{outcome="accepted",platform="web"} 1.0' in text
    assert 'chatgate_inbound_events_total{outcome="duplicate",platform="web"} 1.0' in text
    assert 'chatgate_turns_started_total{platform="web"} 1.0' in text
    assert 'chatgate_turns_finished_total{platform="web"} 1.0' in text
    assert 'chatgate_turn_duration_seconds_count{platform="web"} 1.0' in text
    assert 'chatgate_model_tokens_total{kind="prompt"}' in text
    assert 'chatgate_model_tokens_total{kind="completion"}' in text
    for section in ("system", "history", "current"):
        assert f'chatgate_context_tokens_count{{section="{section}"}} 1.0' in text
    assert "chatgate_turn_tokens_count 1.0" in text
    # The turn's journal checkpoints, each timed once.
    for what in ("reply_intent", "reply_sent_and_next"):
        assert f'chatgate_checkpoint_seconds_count{{what="{what}"}} 1.0' in text
    assert "chatgate_queue_lag_seconds 0.0" in text


async def test_the_stream_delivers_the_reply_as_it_lands(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    """Server-sent events carry the user's message and then the reply, without polling."""
    model_server.script(Scripted(text="streamed reply", delay=0.3))
    client = await make_client(model_server)
    accepted = await _post(client, "s", "first")
    stream = await client.get(f"/api/conversations/{accepted['conversation_id']}/stream")
    assert stream.headers["Content-Type"].startswith("text/event-stream")
    seen: list[dict[str, Any]] = []
    async with asyncio.timeout(15):
        while not any(item["role"] == "assistant" for item in seen):
            line = (await stream.content.readline()).decode()
            if line.startswith("data: "):
                seen.append(json.loads(line.removeprefix("data: ")))
    stream.close()
    assert [i["text"] for i in seen] == ["first", "streamed reply"]


TOKEN = "0123456789abcdef-web-token"


async def test_web_token_is_required_when_set(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    """With CHATGATE_WEB_TOKEN the API answers the token holder only (a bearer header, or
    the cookie signing in sets), never a token in a URL; the page itself loads, health
    stays open."""
    client = await make_client(model_server, CHATGATE_WEB_TOKEN=TOKEN)
    assert (await client.get("/api/conversations")).status == 401
    assert (await client.get("/")).status == 200  # the page, with its sign-in form
    wrong = await client.get("/api/conversations", headers={"Authorization": "Bearer nope"})
    assert wrong.status == 401
    bearer = await client.get("/api/conversations", headers={"Authorization": f"Bearer {TOKEN}"})
    assert bearer.status == 200
    assert (await client.get(f"/api/conversations?token={TOKEN}")).status == 401
    refused = await client.post("/api/messages", json={"conversation": "x", "text": "y"})
    assert refused.status == 401
    assert (await client.get("/healthz")).status == 200

    bad = await client.post("/api/session", json={"token": "not-it"})
    assert bad.status == 401
    signed = await client.post("/api/session", json={"token": TOKEN})
    assert signed.status == 204
    cookie = signed.cookies["chatgate_session"]
    assert cookie["httponly"]
    assert cookie["samesite"] == "Strict"
    assert TOKEN not in cookie.value
    assert (await client.get("/api/conversations")).status == 200  # the cookie, no header
    assert (await client.delete("/api/session")).status == 204
    client.session.cookie_jar.clear()
    assert (await client.get("/api/conversations")).status == 401


async def test_every_response_carries_the_framing_and_sniffing_headers(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    client = await make_client(model_server)
    for path in ("/", "/static/app.js", "/static/style.css", "/api/conversations", "/nope"):
        response = await client.get(path)
        assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"], path
        assert response.headers["X-Frame-Options"] == "DENY", path
        assert response.headers["X-Content-Type-Options"] == "nosniff", path


async def test_without_a_token_a_proxied_request_gets_403(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    """nginx in front (or any proxy) on this machine: every request looks local, so none
    is served without a token."""
    client = await make_client(model_server)
    for header in ("Forwarded", "X-Forwarded-For", "X-Real-IP", "Via"):
        for path in ("/", "/api/conversations", "/api/pairing"):
            response = await client.get(path, headers={header: "for=203.0.113.9"})
            assert response.status == 403, (path, header)
    assert (await client.get("/api/conversations")).status == 200


async def test_without_a_token_only_web_conversations_are_read(
    make_client: ClientFactory, model_server: FakeModelServer, database_url: str
) -> None:
    """A Slack conversation's messages are the operator's (token holder's) to read."""
    client = await make_client(model_server)
    web = await _post(client, "mine", "hello")
    store_conversation = await _slack_conversation(database_url)
    assert (await client.get(f"/api/conversations/{web['conversation_id']}/messages")).status == 200
    for suffix in ("messages", "stream"):
        response = await client.get(f"/api/conversations/{store_conversation}/{suffix}")
        assert response.status == 404


async def _slack_conversation(database_url: str) -> str:
    from agent_core.events import InboundMessage
    from agent_core.storage.database import open_database
    from agent_core.storage.store import Store

    async with open_database(database_url) as database:
        accepted = await Store(database).accept_inbound(
            InboundMessage(
                platform="slack",
                workspace="T1",
                channel="C1",
                user="slack:U1",
                text="private",
                platform_event_id="s1",
            ),
            open_turn=False,
        )
    return accepted.conversation_id


async def test_no_model_configured_reply_names_the_setting(make_client: ClientFactory) -> None:
    """Without CHATGATE_MODEL the gateway runs and the reply says what to set."""
    client = await make_client(None)
    accepted = await _post(client, "n", "hello?")
    items = await _replies(client, accepted["conversation_id"], 1)
    assert items[-1]["role"] == "system"
    assert "CHATGATE_MODEL" in items[-1]["text"]


async def test_a_transient_model_error_is_retried(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    """A 500 from the model is retried by litellm's router; the user sees the answer."""
    model_server.script(Scripted(status=500), "after retry")
    client = await make_client(model_server, CHATGATE_MODEL_RETRIES="2")
    accepted = await _post(client, "r", "try")
    items = await _replies(client, accepted["conversation_id"], 1, timeout=60)
    assert items[-1]["text"] == "after retry"
    assert len(model_server.requests) == 2


async def test_fallback_model_answers_when_the_primary_fails(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    """CHATGATE_FALLBACK_MODELS is tried when the primary keeps failing."""
    model_server.script(Scripted(status=500), "from the fallback")
    client = await make_client(model_server, CHATGATE_FALLBACK_MODELS="openai/backup-model")
    accepted = await _post(client, "f", "hello")
    items = await _replies(client, accepted["conversation_id"], 1, timeout=60)
    assert items[-1]["text"] == "from the fallback"
    assert [r["model"] for r in model_server.requests] == ["fake-model", "backup-model"]


async def test_when_every_model_fails_the_user_is_told(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    """No answer from any model: a system message says so and the turn ends."""
    model_server.script(Scripted(status=500), Scripted(status=500))
    client = await make_client(model_server)
    accepted = await _post(client, "x", "hello")
    items = await _replies(client, accepted["conversation_id"], 1, timeout=60)
    assert items[-1]["role"] == "system"
    assert "could not be reached" in items[-1]["text"]


async def test_the_local_admin_lets_a_stranger_in_from_the_web_chat(
    make_client: ClientFactory,
) -> None:
    """GET /api/pairing lists pending codes; POST approves once (409 after); 404 unknown."""
    from gateway.runtime import RUNTIME
    from tests.fakes.records import pending_pairing

    client = await make_client(None)
    await pending_pairing(client.server.app[RUNTIME].store, user="telegram:42", code="WXYZ-2345")
    state = await (await client.get("/api/pairing")).json()
    assert [(p["code"], p["user"]) for p in state["pending"]] == [("WXYZ-2345", "telegram:42")]
    approved = await client.post("/api/pairing/WXYZ-2345", json={})
    assert approved.status == 200
    assert (await approved.json())["user"] == "telegram:42"
    assert (await client.post("/api/pairing/WXYZ-2345", json={})).status == 409
    assert (await client.post("/api/pairing/NOPE-NOPE", json={})).status == 404
    state = await (await client.get("/api/pairing")).json()
    assert state["pending"] == []
    assert [(u["user"], u["approved_by"]) for u in state["paired"]] == [
        ("telegram:42", "web:local")
    ]


async def test_text_commands_are_answered_without_the_model(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    """/help lists the commands, /usage counts tokens, /new hides earlier history from the
    model, and none of them is sent to the model."""
    client = await make_client(model_server)
    first = await _post(client, "cmd", "remember the word banana")
    await _replies(client, first["conversation_id"], 1)
    await _post(client, "cmd", "/help")
    await _post(client, "cmd", "/usage")
    await _post(client, "cmd", "/jobs")
    await _post(client, "cmd", "/new")
    await _post(client, "cmd", "what was the word?")
    items = await _replies(client, first["conversation_id"], 6)
    notes = [i["text"] for i in items if i["role"] == "system"]
    assert notes[0].startswith("Commands:\n/help")
    assert notes[1].startswith("This conversation so far: 1 turns, 1 model calls,")
    assert notes[2].startswith("No schedules in this conversation.")
    assert notes[3].startswith("Started afresh")
    assert len(model_server.requests) == 2
    contents = [m["content"] for m in model_server.requests[1]["messages"]]
    assert contents[1:] == ["what was the word?"]
    assert "banana" not in str(contents)


async def test_schedule_commands_explain_themselves_and_refuse_bad_input(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    """/schedule explains how; /cancel and /bg without what they need say how to use them;
    /cancel of an unknown id or of someone else's schedule changes nothing."""
    client = await make_client(model_server)
    first = await _post(client, "cmds", "/schedule")
    await _post(client, "cmds", "/cancel")
    await _post(client, "cmds", "/cancel sc_00000000")
    await _post(client, "cmds", "/bg")
    items = await _replies(client, first["conversation_id"], 4)
    notes = [i["text"] for i in items if i["role"] == "system"]
    assert notes[0].startswith("Ask me in words")
    assert notes[1] == "Usage: /cancel ID (the ids are in /jobs)."
    assert notes[2] == "Could not cancel: there is no schedule sc_00000000."
    assert notes[3].startswith("Usage: /bg PROMPT")
    assert model_server.requests == []


async def test_readyz_names_what_is_down_without_its_error_text(
    make_client: ClientFactory, model_server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver's message (a host, a user name) stays in the log, out of /readyz."""
    from agent_core.errors import StorageError
    from agent_core.storage.database import Database

    client = await make_client(model_server)

    async def down(self: Database) -> None:
        raise StorageError('password authentication failed for user "ops" at db-7.internal')

    monkeypatch.setattr(Database, "ping", down)
    response = await client.get("/readyz")
    assert response.status == 503
    body = await response.json()
    assert body == {"ready": False, "reason": "database: down"}


async def test_metrics_can_require_a_token(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    token = "metrics-token-0123456789"
    client = await make_client(model_server, CHATGATE_METRICS_TOKEN=token)
    assert (await client.get("/metrics")).status == 401
    wrong = await client.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status == 401
    right = await client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert right.status == 200
    assert "chatgate_inbound_events" in await right.text()

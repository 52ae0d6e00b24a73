"""The operator console's API through the running gateway (in-process, real litellm against
the fake model): who may reach it, a turn's timeline, deciding from the console, schedules,
pairing, usage, the audit log and its export, health."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from tests.fakes.http_echo import EchoServer
from tests.fakes.model_server import FakeModelServer
from tests.scenario.conftest import ClientFactory
from tests.scenario.test_approvals_api import tool_call

Client = TestClient[Any, Any]
TOKEN = "console-test-token-1f9c2e"


async def _get(client: Client, path: str, status: int = 200) -> Any:
    response = await client.get(path)
    assert response.status == status, (path, await response.text())
    return await response.json()


async def _post(client: Client, path: str, body: Any, status: int = 200) -> Any:
    response = await client.post(path, json=body)
    assert response.status == status, (path, await response.text())
    return await response.json()


async def _until(probe: Any, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = await probe()
        if found:
            return found
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_the_console_is_served_like_the_web_chat(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    """Without a token: loopback only, a proxied request is refused (403); every response
    carries the framing and sniffing headers. With a token the page loads (it holds no
    data) and the API answers only the token holder."""
    client = await make_client(model_server)
    page = await client.get("/console")
    assert page.status == 200
    assert "chatgate console" in await page.text()
    paths = ("/console", "/api/console/turns", "/static/console.js", "/api/console/health",
             "/api/console/audit.jsonl")  # fmt: skip
    for path in paths:
        response = await client.get(path)
        assert response.status == 200, path
        assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"], path
        assert response.headers["X-Frame-Options"] == "DENY", path
        assert response.headers["X-Content-Type-Options"] == "nosniff", path
        for header in ("X-Forwarded-For", "Forwarded", "X-Real-IP", "Via"):
            proxied = await client.get(path, headers={header: "for=203.0.113.9"})
            assert proxied.status == 403, (path, header)
            assert "frame-ancestors 'none'" in proxied.headers["Content-Security-Policy"]
    for header in ("X-Forwarded-Host", "X-Client-IP", "True-Client-IP", "CF-Connecting-IP"):
        proxied = await client.get("/api/console/turns", headers={header: "203.0.113.9"})
        assert proxied.status == 403, header
    # A page elsewhere rebinding its name to 127.0.0.1 names itself in Host.
    for host in ("evil.example:80", "localhost:80@evil.example"):
        rebound = await client.get("/api/console/turns", headers={"Host": host})
        assert rebound.status == 403, host
    # Another site's page, even for a GET (an export writes to the audit log).
    for site in ("cross-site", "same-site"):
        framed = await client.get(
            "/api/console/export?user=web:x", headers={"Sec-Fetch-Site": site}
        )
        assert framed.status == 403, site
    own = await client.get("/api/console/turns", headers={"Sec-Fetch-Site": "same-origin"})
    assert own.status == 200
    # Writes come from the console's own origin only.
    cross = await client.post(
        "/api/console/revoke", json={"user": "slack:U1"}, headers={"Origin": "http://evil.example"}
    )
    assert cross.status == 403

    guarded = await make_client(model_server, CHATGATE_WEB_TOKEN=TOKEN)
    assert (await guarded.get("/console")).status == 200
    assert (await guarded.get("/api/console/turns")).status == 401
    assert (await guarded.get(f"/api/console/turns?token={TOKEN}")).status == 401
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert (await guarded.get("/api/console/turns", headers=bearer)).status == 200
    assert (await guarded.get("/api/console/audit.jsonl")).status == 401


async def test_bad_console_input_gets_a_400_not_a_500(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    client = await make_client(model_server)
    for path in (
        "/api/console/turns?before=abc",
        "/api/console/turns?limit=-",
        "/api/console/turns?before=99999999999999999999999",
        "/api/console/turns?before=%C2%B2",
        "/api/console/conversations?q=hello&before=99999999999999999999999",
        "/api/console/conversations?q=hello&before=%C2%B2",
        "/api/console/conversations?before=2024-01-01T00:00:00%7Cx",
        "/api/console/conversations?before=9999-12-31T23:59:59.999999-23:59%7Cx",
        "/api/console/conversations?before=0001-01-01T00:00:00%2B23:59%7Cx",
        "/api/console/approvals?state=decided&before=garbage",
        "/api/console/approvals?state=decided&before=2024-01-01T00:00:00",
        "/api/console/conversations?before=nonsense",
        "/api/console/conversations?q=x&before=nonsense",
        "/api/console/usage?by=nothing",
        "/api/console/approvals?state=maybe",
        "/api/console/export",
        "/api/console/audit?q=" + "x" * 500,
        "/api/console/conversations?q=a%00b",
    ):
        assert (await client.get(path)).status == 400, path
    assert (await client.get("/api/console/turns/123456")).status == 404
    assert (await client.get("/api/console/turns/nope")).status == 404
    assert (await client.get("/api/console/conversations/none/messages")).status == 404
    for path, body in (
        ("/api/console/approvals/ap_000000", {"decision": "maybe"}),
        ("/api/console/schedules/sc_x", {"action": "explode"}),
        ("/api/console/schedules", {"prompt": "x"}),
        ("/api/console/pairing/ABCD-EFGH", {"action": "adopt"}),
        ("/api/console/revoke", {"user": 5}),
        ("/api/console/forget", {"user": "web:someone"}),
        ("/api/console/forget", [1, 2]),
    ):
        assert (await client.post(path, json=body)).status == 400, (path, body)
    for spec, zone in (
        ("every 99999999999999999999d", None),
        ("in 99999999999999999999d", None),
        ("9999-12-31T23:00:00-05:00", None),
        ("9999-12-31T23:30:00", "America/New_York"),
    ):
        body = {"conversation_id": "none", "prompt": "x", "schedule": spec}
        if zone:
            body["timezone"] = zone
        response = await client.post("/api/console/schedules", json=body)
        assert response.status in (400, 404), spec
    deep = "[" * 100_000 + "]" * 100_000
    response = await client.post(
        "/api/console/forget", data=deep, headers={"Content-Type": "application/json"}
    )
    assert response.status in (400, 413)
    assert (
        await client.post("/api/console/approvals/ap_000000", json={"decision": "approve"})
    ).status == 404


async def test_a_turn_is_found_by_a_word_decided_from_the_console_and_its_timeline_shows_it(
    make_client: ClientFactory, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """A POST through http_request asks for approval; the console lists it as pending and
    approves it as console:operator; the turn finishes once, and its timeline shows the
    model calls (tokens, latency), the tool call with its arguments, result and approval,
    and the reply's receipt. The audit log has the decision and the call."""
    with EchoServer() as echo:
        # Plain POSTs ask (the default policy for http_request beyond GET).
        config = tmp_path / "chatgate.toml"
        config.write_text(f'[tools.http_request]\nallowed_hosts = ["{echo.entry}"]\n')
        model_server.script(
            tool_call(
                "http_request",
                {"method": "POST", "url": f"http://{echo.host}/deploy", "body": "go"},
            ),
            "Deployed the pelican build.",
        )
        client = await make_client(model_server, CHATGATE_CONFIG=str(config))
        accepted = await _post(
            client,
            "/api/messages",
            {"conversation": "ops", "text": "please deploy the pelican build"},
            status=202,
        )

        async def pending() -> list[Any]:
            return list((await _get(client, "/api/console/approvals"))["items"])

        waiting = (await _until(pending))[0]
        assert waiting["tool"] == "http_request"
        assert waiting["arguments"]["method"] == "POST"
        assert echo.requests == []
        decided = await _post(
            client, f"/api/console/approvals/{waiting['id']}", {"decision": "approve"}
        )
        assert decided["status"] == "approved"
        again = await client.post(
            f"/api/console/approvals/{waiting['id']}", json={"decision": "deny"}
        )
        assert again.status == 409

        async def finished() -> Any:
            turn = await _get(client, f"/api/console/turns/{accepted['turn_id']}")
            return turn if turn["status"] == "done" else None

        turn = await _until(finished)
    assert len(echo.requests) == 1
    assert len(model_server.requests) == 2

    # Found by a word of the message, on every platform's list.
    found = await _get(client, "/api/console/conversations?q=PELICAN")
    assert [c["id"] for c in found["items"]] == [accepted["conversation_id"]]
    assert "pelican" in found["items"][0]["snippet"]
    assert (await _get(client, "/api/console/conversations?q=zeppelin"))["items"] == []

    kinds = [step["kind"] for step in turn["steps"]]
    assert kinds[0] == "model_call"
    assert "tool_call" in kinds
    call = next(step for step in turn["steps"] if step["kind"] == "tool_call")
    assert call["tool"] == "http_request"
    assert call["arguments"]["url"].endswith("/deploy")
    assert call["outcome"] == "ok"
    assert "200" in call["result"]
    assert call["ms"] is not None
    assert call["approval"]["decided_by"] == "console:operator"
    assert call["approval"]["status"] == "approved"
    assert call["approval"]["waited_seconds"] >= 0
    model = turn["steps"][0]
    assert model["prompt_tokens"] > 0
    assert model["ms"] is not None
    assert model["context_tokens"]
    reply = [m for m in turn["messages"] if m["role"] == "assistant"]
    assert reply[0]["text"] == "Deployed the pelican build."
    assert reply[0]["receipt"]  # the web chat's delivery receipt

    turns = await _get(client, f"/api/console/turns?conversation={accepted['conversation_id']}")
    assert turns["items"][0]["tool_calls"] == 1
    assert turns["items"][0]["tokens"] > 0

    audit = (await _get(client, "/api/console/audit?q=http_request"))["items"]
    actions = {(e["action"], e["actor"]) for e in audit}
    assert ("approval.approved", "console:operator") in actions
    assert ("tool.call", "web:local") in actions
    assert all("pelican" not in json.dumps(e) for e in audit)  # names and counts, no text
    export = await client.get("/api/console/audit.jsonl")
    assert export.status == 200
    lines = [json.loads(line) for line in (await export.text()).splitlines()]
    assert {"config.start", "approval.approved", "tool.call"} <= {e["action"] for e in lines}
    assert [e["id"] for e in lines] == sorted(e["id"] for e in lines)


async def test_schedules_are_created_edited_paused_run_now_and_deleted_from_the_console(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    """The listing shows the next five fire times in the schedule's zone; Run now makes one
    run whose reply lands in the conversation; each change is audited."""
    model_server.script("Report for you.")
    client = await make_client(model_server)
    accepted = await _post(
        client, "/api/messages", {"conversation": "reports", "text": "/help"}, status=202
    )
    conversation_id = accepted["conversation_id"]
    created = await _post(
        client,
        "/api/console/schedules",
        {
            "conversation_id": conversation_id,
            "prompt": "write the report",
            "schedule": "0 9 * * *",
            "timezone": "Europe/Berlin",
        },
        status=201,
    )
    schedule_id = created["id"]
    listed = (await _get(client, "/api/console/schedules"))["items"]
    mine = next(s for s in listed if s["id"] == schedule_id)
    assert len(mine["next_fire_times"]) == 5
    assert all(t[11:16] == "09:00" for t in mine["next_fire_times"])
    assert all(t.endswith(("+01:00", "+02:00")) for t in mine["next_fire_times"])
    assert mine["created_by"] == "console:operator"

    edited = await _post(
        client,
        f"/api/console/schedules/{schedule_id}",
        {"action": "edit", "schedule": "30 7 * * 1", "timezone": "UTC"},
    )
    assert edited["edited"]
    listed = (await _get(client, "/api/console/schedules"))["items"]
    mine = next(s for s in listed if s["id"] == schedule_id)
    assert all(t[11:16] == "07:30" and t.endswith("+00:00") for t in mine["next_fire_times"])

    paused = await _post(client, f"/api/console/schedules/{schedule_id}", {"action": "pause"})
    assert paused["status"] == "paused"
    ran = await _post(client, f"/api/console/schedules/{schedule_id}", {"action": "run_now"})
    assert len(ran["jobs"]) == 1

    async def delivered() -> Any:
        runs = (await _get(client, f"/api/console/schedules/{schedule_id}/runs"))["items"]
        return runs if runs and runs[0]["status"] == "done" else None

    runs = await _until(delivered)
    assert runs[0]["receipt"]
    said = await _get(client, f"/api/conversations/{conversation_id}/messages")
    assert "Report for you." in [m["text"] for m in said["items"]]

    resumed = await _post(client, f"/api/console/schedules/{schedule_id}", {"action": "resume"})
    assert resumed["status"] == "active"
    deleted = await _post(client, f"/api/console/schedules/{schedule_id}", {"action": "delete"})
    assert deleted["status"] == "deleted"
    gone = await client.post(f"/api/console/schedules/{schedule_id}", json={"action": "pause"})
    assert gone.status == 404
    actions = [
        e["action"] for e in (await _get(client, f"/api/console/audit?q={schedule_id}"))["items"]
    ]
    for action in ("create", "edit", "pause", "run_now", "resume", "delete"):
        assert f"schedule.{action}" in actions


async def test_usage_people_and_health_pages(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    model_server.script("one")
    client = await make_client(
        model_server, CHATGATE_BUDGET_USER_DAILY_TOKENS="1000", CHATGATE_RETENTION_DAYS="30"
    )
    accepted = await _post(
        client, "/api/messages", {"conversation": "u", "text": "count me"}, status=202
    )

    async def done() -> Any:
        turn = await _get(client, f"/api/console/turns/{accepted['turn_id']}")
        return turn if turn["status"] == "done" else None

    turn = await _until(done)
    tokens = turn["prompt_tokens"] + turn["completion_tokens"]
    assert tokens > 0
    for by in ("day", "user", "conversation", "platform", "model"):
        usage = await _get(client, f"/api/console/usage?by={by}&days=7")
        assert len(usage["items"]) == 1, by
        assert usage["items"][0]["tokens"] == tokens, by
        assert usage["items"][0]["turns"] == 1, by
        assert usage["items"][0]["model_calls"] == 1, by
    assert usage["budgets"]["user_daily_tokens"] == 1000
    assert usage["today"]["per_user"]["web:local"]["tokens"] == tokens
    assert usage["totals"]["model_calls"] == 1
    people = await _get(client, "/api/console/people")
    assert people["usage"]["web:local"]["tokens"] == tokens
    health = await _get(client, "/api/console/health")
    assert health["processes"][0]["rss_bytes"] > 10_000_000
    assert "web" in health["platforms"]
    assert health["journal"]["failed_turns_last_hour"] == 0


async def test_with_another_platform_and_no_token_the_console_is_closed(
    make_client: ClientFactory, model_server: FakeModelServer, slack: Any
) -> None:
    """The console acts as an admin on every platform: with Slack configured it needs the
    token, loopback or not (the web chat itself still answers there, for web conversations)."""
    client = await make_client(model_server, **slack.settings())
    for path in ("/console", "/api/console/turns", "/api/console/people"):
        response = await client.get(path)
        assert response.status == 403, path
        assert "CHATGATE_WEB_TOKEN" in (await response.json())["error"]
    assert (await client.get("/api/conversations")).status == 200
    guarded = await make_client(model_server, CHATGATE_WEB_TOKEN=TOKEN, **slack.settings())
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert (await guarded.get("/api/console/turns", headers=bearer)).status == 200


async def test_the_console_is_the_web_user_for_the_two_person_rule(
    make_client: ClientFactory, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """A policy that wants someone other than the requester: the console (whoever is on
    loopback, like every web user) may not approve a web user's own request; nothing runs."""
    config = tmp_path / "chatgate.toml"
    config.write_text(
        '[[policy]]\ntool = "run_command"\ndecision = "ask"\n'
        'approvers = ["role:admin"]\nself_approve = false\n'
    )
    model_server.script(tool_call("run_command", {"command": "echo two-person"}))
    client = await make_client(model_server, CHATGATE_CONFIG=str(config), CHATGATE_SANDBOX="none")
    await _post(
        client, "/api/messages", {"conversation": "x", "text": "run it", "user": "alice"}, 202
    )

    async def pending() -> list[Any]:
        return list((await _get(client, "/api/console/approvals"))["items"])

    waiting = (await _until(pending))[0]
    refused = await client.post(
        f"/api/console/approvals/{waiting['id']}", json={"decision": "approve"}
    )
    assert refused.status == 403
    assert len(model_server.requests) == 1
    assert (await _get(client, "/api/console/approvals"))["items"][0]["status"] == "pending"


async def test_search_folds_case_in_every_script(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    client = await make_client(model_server)
    await _post(client, "/api/messages", {"conversation": "é", "text": "/help ÉCOLE ΣΟΦΙΑ"}, 202)
    for query in ("ÉCOLE", "école", "σοφια", "ΣΟΦΙΑ"):
        found = await _get(client, f"/api/console/conversations?q={query}")
        assert len(found["items"]) == 1, query
    # LIKE's wildcards are literal text.
    assert (await _get(client, "/api/console/conversations?q=%25"))["items"] == []
    assert (await _get(client, "/api/console/conversations?q=_"))["items"] == []


async def test_a_schedule_paused_from_the_chat_is_in_the_audit_log(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    model_server.script(
        tool_call("schedule_task", {"prompt": "report", "schedule": "0 9 * * *"}), "Scheduled."
    )
    client = await make_client(model_server)
    accepted = await _post(
        client, "/api/messages", {"conversation": "c", "text": "daily report at 9"}, 202
    )

    async def made() -> list[Any]:
        return list((await _get(client, "/api/console/schedules"))["items"])

    [schedule] = await _until(made)
    assert schedule["created_by"] == "web:local"
    await _post(client, f"/api/schedules/{schedule['id']}", {"action": "pause"})
    entries = (await _get(client, f"/api/console/audit?q={schedule['id']}"))["items"]
    assert [(e["action"], e["actor"]) for e in entries] == [("schedule.pause", "web:local")]
    assert accepted["conversation_id"]


async def test_without_a_token_the_console_closes_once_another_platform_has_conversations(
    make_client: ClientFactory, model_server: FakeModelServer, database_url: str
) -> None:
    """A gateway that serves only the web chat, over a database that holds a Slack
    conversation (another gateway received it): the console needs the token."""
    from tests.scenario.test_web_api import _slack_conversation

    client = await make_client(model_server)
    await _slack_conversation(database_url)
    response = await client.get("/api/console/turns")
    assert response.status == 403
    assert "slack" in (await response.json())["error"]

"""``chatgate replay``: journaled turns run again against another (fake) model, with the
recorded tool results served back. The real CLI in a subprocess, the real litellm, the web
chat's API for the recorded conversation."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient
from sqlalchemy import func, insert, select
from sqlalchemy.engine import Connection

from agent_core.storage.schema import (
    approvals,
    conversations,
    feedback,
    messages,
    model_usage,
    turn_steps,
    turns,
)
from tests.fakes.database_reads import read_database
from tests.fakes.gateway import run_chatgate
from tests.fakes.http_echo import EchoServer
from tests.fakes.model_server import FakeModelServer, Scripted
from tests.scenario.conftest import ClientFactory

Client = TestClient[Any, Any]


def call(name: str, arguments: dict[str, Any] | str, call_id: str) -> Scripted:
    """A scripted answer that calls one tool (``arguments`` as a dict or as raw JSON text)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Scripted(
        tool_calls=[
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}
        ]
    )


chatgate = run_chatgate


async def _until(client: Client, path: str, done: Any, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        body = await (await client.get(path)).json()
        if done(body):
            return body
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.05)


def _snapshot(conn: Connection) -> dict[str, Any]:
    """Everything a replay must leave alone."""
    return {
        "messages": conn.execute(
            select(messages.c.id, messages.c.role, messages.c.text, messages.c.turn_id).order_by(
                messages.c.id
            )
        ).all(),
        "turns": conn.execute(select(turns.c.id, turns.c.status).order_by(turns.c.id)).all(),
        "steps": conn.execute(select(func.count()).select_from(turn_steps)).scalar(),
        "approvals": conn.execute(select(approvals.c.id, approvals.c.status)).all(),
        "conversations": conn.execute(
            select(conversations.c.id, conversations.c.summary, conversations.c.updated_at)
        ).all(),
    }


def _replay_usage(conn: Connection) -> list[Any]:
    return conn.execute(
        select(model_usage.c.user_id, model_usage.c.conversation_id, model_usage.c.turn_id).where(
            model_usage.c.user_id.like("replay:%")
        )
    ).all()


async def _recorded_conversation(
    client: Client, model_server: FakeModelServer, echo: EchoServer
) -> tuple[str, int, int]:
    """A conversation of two turns: the first reads a status page (allowed), then deploys
    (a POST, which asks; approved from the web chat); the second thanks the agent."""
    model_server.script(
        call("http_request", {"method": "GET", "url": f"http://{echo.host}/status"}, "c1"),
        call(
            "http_request",
            {"method": "POST", "url": f"http://{echo.host}/deploy", "body": "go"},
            "c2",
        ),
        "Deployed the pelican build; the status page was green.",
        "You are welcome.",
    )
    first = await (
        await client.post(
            "/api/messages", json={"conversation": "ops", "text": "check status, then deploy"}
        )
    ).json()
    conversation = first["conversation_id"]
    path = f"/api/conversations/{conversation}/messages"
    items = await _until(client, path, lambda b: any(i["role"] == "approval" for i in b["items"]))
    approval = next(i for i in items["items"] if i["role"] == "approval")["approval"]
    pressed = await client.post(f"/api/approvals/{approval['id']}", json={"decision": "approve"})
    assert pressed.status == 200
    await _until(client, path, lambda b: sum(i["role"] == "assistant" for i in b["items"]) == 1)
    second = await (
        await client.post("/api/messages", json={"conversation": "ops", "text": "thanks!"})
    ).json()
    await _until(client, path, lambda b: sum(i["role"] == "assistant" for i in b["items"]) == 2)
    return conversation, int(first["turn_id"]), int(second["turn_id"])


async def test_a_replay_serves_recorded_results_and_changes_nothing(
    make_client: ClientFactory,
    model_server: FakeModelServer,
    database_url: str,
    tmp_path: Path,
) -> None:
    """Two turns (tool calls, one approved) replayed against another model with another
    system prompt: the recorded results are served where the new model's calls match (same
    tool, equivalent arguments), the call it was scripted to change is a divergence answered
    "not available", and no request reaches the echo server, no message is sent, and the
    database's conversations, turns, journal and approvals are as they were."""
    with EchoServer() as echo, FakeModelServer() as other:
        config = tmp_path / "chatgate.toml"
        config.write_text(f'[tools.http_request]\nallowed_hosts = ["{echo.entry}"]\n')
        client = await make_client(model_server, CHATGATE_CONFIG=str(config))
        conversation, first, second = await _recorded_conversation(client, model_server, echo)
        assert len(echo.requests) == 2
        recorded_requests = len(model_server.requests)
        page = await (await client.get(f"/api/conversations/{conversation}/messages")).json()
        before = read_database(database_url, _snapshot)

        # The same status read (keys in another order, blanks around the URL), a deploy
        # with other arguments (the divergence), then the recorded deploy, then an answer.
        status_args = f'{{"url": " http://{echo.host}/status ", "method": "GET"}}'
        other.script(
            call("http_request", status_args, "r1"),
            call(
                "http_request",
                {"method": "POST", "url": f"http://{echo.host}/deploy", "body": "go now"},
                "r2",
            ),
            call(
                "http_request",
                {"method": "POST", "url": f"http://{echo.host}/deploy", "body": "go"},
                "r3",
            ),
            "Deployed (replayed).",
            "You are welcome.",
        )
        settings = {
            "CHATGATE_DATABASE_URL": database_url,
            "CHATGATE_CONFIG": str(config),
            **model_server.settings(),
        }
        dry = chatgate(
            "replay", "--conversation", conversation, "--model", "openai/replay-model",
            "--api-base", other.base_url, "--dry-run", cwd=tmp_path, **settings,
        )  # fmt: skip
        assert dry.returncode == 0, dry.stderr
        assert "2 turns to replay against openai/replay-model: about 4 model calls" in dry.stdout
        assert other.requests == []

        report = tmp_path / "replay.json"
        page_file = tmp_path / "replay.html"
        # The model and system prompt to try, as a [[profile]] of chatgate.toml.
        with config.open("a") as out:
            out.write(
                '[[profile]]\nname = "terse"\nmodel = "openai/replay-model"\n'
                f'api_base = "{other.base_url}"\nsystem_prompt = "You are terse."\n'
            )
        unknown = chatgate("replay", "--profile", "chatty", cwd=tmp_path, **settings)
        assert unknown.returncode == 2
        assert "--profile: no [[profile]] named 'chatty' (known: terse)" in unknown.stderr
        result = chatgate(
            "replay", "--conversation", conversation, "--profile", "terse",
            "--json", str(report), "--html", str(page_file), cwd=tmp_path, **settings,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert "2 turns: 1 with the same answer, 1 with different tool calls" in result.stdout

        # Nothing real happened, and nothing was written but the replay's spend.
        assert len(echo.requests) == 2
        assert len(model_server.requests) == recorded_requests
        assert read_database(database_url, _snapshot) == before
        again = await (await client.get(f"/api/conversations/{conversation}/messages")).json()
        assert again == page
        assert read_database(database_url, _replay_usage) == [
            (u, None, None) for u, *_rest in read_database(database_url, _replay_usage)
        ]
        assert len(read_database(database_url, _replay_usage)) == len(other.requests) == 5

    # What the new model saw: the new system prompt; the recorded results where its calls
    # matched, "not available" where they did not; the history before the second turn.
    asked = other.requests
    assert asked[0]["messages"][0] == {"role": "system", "content": "You are terse."}
    assert asked[0]["messages"][-1]["content"] == "check status, then deploy"
    served = [m for m in asked[3]["messages"] if m["role"] == "tool"]
    assert len(served) == 3
    assert served[0]["content"].startswith("HTTP 200")
    assert '"method": "GET"' in served[0]["content"]
    assert served[1]["content"].startswith("not available in replay")
    assert '"method": "POST"' in served[2]["content"]
    assert '"body": "go"' in served[2]["content"]
    thanks = [m["content"] for m in asked[4]["messages"]]
    assert thanks[-1] == "thanks!"
    assert "Deployed the pelican build; the status page was green." in thanks

    document = json.loads(report.read_text())
    assert document["model"] == "openai/replay-model"
    assert document["totals"]["turns"] == 2
    assert document["totals"]["diverged"] == 1
    by_turn = {t["turn_id"]: t for t in document["turns"]}
    deploy = by_turn[first]
    assert [c["served"] for c in deploy["replay"]["calls"]] == [
        "recorded",
        "unavailable",
        "recorded",
    ]
    assert deploy["new_calls"] == [
        {
            "name": "http_request",
            "arguments": {"method": "POST", "url": f"http://{echo.host}/deploy", "body": "go now"},
        }
    ]
    assert deploy["skipped_calls"] == []
    assert [c.get("approval") for c in deploy["original"]["calls"]] == [
        None,
        "approved by web:local",
    ]
    assert deploy["original"]["text"] == "Deployed the pelican build; the status page was green."
    assert deploy["replay"]["text"] == "Deployed (replayed)."
    assert 0 < deploy["similarity"] < 1
    assert "-Deployed the pelican build" in deploy["diff"]
    assert deploy["original"]["model_calls"] == 3
    assert deploy["replay"]["model_calls"] == 4
    assert deploy["replay"]["tokens"] > 0
    assert by_turn[second]["similarity"] == 1.0
    assert by_turn[second]["diverged"] is False
    html = page_file.read_text()
    assert "Replay against openai/replay-model" in html
    assert "go now" in html
    assert "<script" not in html


async def test_replay_selects_by_rating_and_stops_at_a_budget(
    make_client: ClientFactory,
    model_server: FakeModelServer,
    database_url: str,
    tmp_path: Path,
) -> None:
    """``--feedback down`` picks the turns rated down; a daily token budget the replayer has
    spent stops the replay before its first model call; ``--max-cost`` and bad options are
    refused with exit 2."""
    with FakeModelServer() as other:
        client = await make_client(model_server)
        path = None
        turn_ids = []
        for text in ("one", "two", "three"):
            body = await (
                await client.post("/api/messages", json={"conversation": "c", "text": text})
            ).json()
            path = f"/api/conversations/{body['conversation_id']}/messages"
            turn_ids.append(int(body["turn_id"]))
            count = len(turn_ids)
            await _until(
                client,
                path,
                lambda b, n=count: sum(i["role"] == "assistant" for i in b["items"]) == n,
            )

        def rate(conn: Connection) -> None:
            row = conn.execute(
                select(turns.c.conversation_id, messages.c.id)
                .join(messages, messages.c.turn_id == turns.c.id)
                .where(turns.c.id == turn_ids[1], messages.c.role == "assistant")
            ).one()
            from agent_core.events import utcnow

            conn.execute(
                insert(feedback).values(
                    turn_id=turn_ids[1], conversation_id=row[0], message_id=row[1],
                    user_id="web:local", rating="down", created_at=utcnow(), updated_at=utcnow(),
                )
            )  # fmt: skip

        await _write(database_url, rate)
        settings = {"CHATGATE_DATABASE_URL": database_url, **model_server.settings()}
        report = tmp_path / "down.json"
        result = chatgate(
            "replay", "--feedback", "down", "--model", "openai/other", "--api-base",
            other.base_url, "--json", str(report), cwd=tmp_path, **settings,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        document = json.loads(report.read_text())
        assert [t["turn_id"] for t in document["turns"]] == [turn_ids[1]]
        assert document["turns"][0]["ratings"] == ["down"]
        assert len(other.requests) == 1
        # And eval: every turn rated down becomes a case.
        suite = tmp_path / "rated.toml"
        added = chatgate(
            "eval", "add", "--feedback", "down", "--to", str(suite), cwd=tmp_path, **settings
        )
        assert added.returncode == 0, added.stderr
        assert added.stdout == f"turn {turn_ids[1]} added to {suite} as a case\n"
        assert ", rated down)" in suite.read_text()
        assert 'message = ["two"]' in suite.read_text()

        # The replayer has spent tokens today: a daily token budget of 1 stops the next run.
        spent = chatgate(
            "replay", str(turn_ids[0]), "--model", "openai/other", "--api-base", other.base_url,
            cwd=tmp_path, CHATGATE_BUDGET_USER_DAILY_TOKENS="1", **settings,
        )  # fmt: skip
        assert spent.returncode == 0, spent.stderr
        assert "budget reached" in spent.stdout
        assert len(other.requests) == 1

        for bad in (["--feedback", "meh"], ["--since", "yesterday"], ["--platform", "irc"]):
            refused = chatgate("replay", *bad, cwd=tmp_path, **settings)
            assert refused.returncode == 2, (bad, refused.stderr)
            assert refused.stderr.startswith(f"chatgate: {bad[0]}")
        none = chatgate("replay", "99999", cwd=tmp_path, **settings)
        assert none.returncode == 1
        assert "no finished turn matches" in none.stdout


async def _write(database_url: str, fn: Any) -> None:
    from agent_core.storage.database import Database

    database = Database(database_url)
    try:
        await database.write(fn)
    finally:
        await database.dispose()

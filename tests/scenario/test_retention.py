"""Retention: past ``CHATGATE_RETENTION_DAYS`` message text and journal content go (counts and
costs stay), what is newer and what an open turn still reads stay; and ``chatgate forget`` on
the command line exports, then erases."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient
from sqlalchemy import text, update
from sqlalchemy.engine import Connection

from agent_core.events import utcnow
from agent_core.storage.database import Database
from agent_core.storage.erasure import EXPIRED
from agent_core.storage.operations import Operations
from agent_core.storage.schema import messages, turn_steps, turns
from tests.fakes.gateway import CHATGATE, child_env
from tests.fakes.http_echo import EchoServer, http_allowed_config
from tests.fakes.model_server import FakeModelServer
from tests.scenario.conftest import ClientFactory
from tests.scenario.test_approvals_api import tool_call

Client = TestClient[Any, Any]


async def _exchange(client: Client, words: str, user: str = "local") -> int:
    response = await client.post(
        "/api/messages", json={"conversation": "old", "text": words, "user": user}
    )
    assert response.status == 202
    turn_id = int((await response.json())["turn_id"])
    deadline = time.monotonic() + 20
    while (await (await client.get(f"/api/console/turns/{turn_id}")).json())["status"] != "done":
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    return turn_id


def _age(conn: Connection, turn_id: int, days: float) -> None:
    """Move a turn, its messages and its steps ``days`` into the past."""
    then = utcnow() - timedelta(days=days)
    conn.execute(update(turns).where(turns.c.id == turn_id).values(created_at=then))
    conn.execute(update(messages).where(messages.c.turn_id == turn_id).values(created_at=then))
    conn.execute(update(turn_steps).where(turn_steps.c.turn_id == turn_id).values(started_at=then))


def _texts(conn: Connection, turn_id: int) -> tuple[list[str], list[Any]]:
    said = conn.execute(select_texts, {"t": turn_id}).scalars().all()
    outputs = conn.execute(
        turn_steps.select().where(turn_steps.c.turn_id == turn_id).order_by(turn_steps.c.seq)
    ).all()
    return list(said), [row.output for row in outputs]


select_texts = text("SELECT text FROM messages WHERE turn_id = :t ORDER BY id")


async def test_retention_removes_old_text_and_tool_output_and_keeps_costs(
    make_client: ClientFactory, model_server: FakeModelServer, database_url: str, tmp_path: Path
) -> None:
    with EchoServer() as echo:
        config = http_allowed_config(tmp_path / "chatgate.toml", echo)
        model_server.script(
            tool_call("http_request", {"method": "GET", "url": f"http://{echo.host}/old"}),
            "The old answer.",
            "The new answer.",
        )
        client = await make_client(model_server, CHATGATE_CONFIG=str(config))
        old = await _exchange(client, "an old question about walruses")
        new = await _exchange(client, "a new question about walruses")
    database = Database(database_url)
    try:
        await database.write(_age, old, 40)
        operations = Operations(database)
        totals = await operations.totals()
        done = await operations.expire_old(days=30)
        assert done["messages"] == 2  # the old question and its answer
        assert done["journal_steps"] >= 3  # model call, tool call, model call
        said, outputs = await database.read(_texts, old)
        assert said == [EXPIRED, EXPIRED]
        tool = next(
            o for o in outputs if isinstance(o, dict) and "content" not in o and o.get("status")
        )
        assert tool["removed"] == "retention"
        assert all("walrus" not in json.dumps(o) for o in outputs)
        model = next(o for o in outputs if isinstance(o, dict) and o.get("prompt_tokens"))
        assert model["removed"] == "retention"
        assert "text" not in model
        assert await operations.totals() == totals
        fresh, _ = await database.read(_texts, new)
        assert fresh == ["a new question about walruses", "The new answer."]
        again = await operations.expire_old(days=30)
        assert again["messages"] == 0
        assert again["journal_steps"] == 0
        entries = await operations.audit(action="retention.expire")
        assert entries[0].detail["messages"] == 2  # type: ignore[index,call-overload]
    finally:
        await database.dispose()


async def test_chatgate_forget_exports_then_erases(
    make_client: ClientFactory, model_server: FakeModelServer, database_url: str, tmp_path: Path
) -> None:
    model_server.script("Sure, narwhals.")
    client = await make_client(model_server)
    await _exchange(client, "tell me about narwhals", user="carol")
    export = tmp_path / "carol.json"
    result = await asyncio.to_thread(
        subprocess.run,
        [str(CHATGATE), "forget", "web:carol", "--export", str(export), "--yes"],
        cwd=tmp_path,
        env=child_env(CHATGATE_DATABASE_URL=database_url, CHATGATE_STATE_DIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "exported 2 messages" in result.stdout
    document = json.loads(export.read_text())
    assert [m["text"] for m in document["messages"]] == [
        "tell me about narwhals",
        "Sure, narwhals.",
    ]
    assert export.stat().st_mode & 0o077 == 0
    receipt = json.loads(result.stdout.split("erased: ", 1)[1])
    assert receipt["messages"] == 2
    said = await (await client.get("/api/console/conversations?q=narwhal")).json()
    assert said["items"] == []
    audit = await (await client.get("/api/console/audit?action=person.erase")).json()
    assert audit["items"][0]["actor"].startswith("cli:")

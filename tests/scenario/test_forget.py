"""A person's data, exported and erased through the running gateway: afterwards no column
of any table holds their words (read over every table and column the database has, on
SQLite and on PostgreSQL), someone else's words in the same conversation stay, and every
usage total reads the same."""

from __future__ import annotations

import asyncio
import io
import json
import time
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient
from sqlalchemy import text
from sqlalchemy.engine import Connection

from agent_core.storage.database import Database
from tests.fakes.database_reads import read_database
from tests.fakes.http_echo import EchoServer
from tests.fakes.model_server import FakeModelServer
from tests.scenario.conftest import ClientFactory
from tests.scenario.test_approvals_api import tool_call

Client = TestClient[Any, Any]
# Hers and his: distinct words no other text holds. "zxerasable" is what is searched: the
# full-text index stores terms prefix-compressed, so its leading letters may be shared.
HERS = "qqzxerasable"
NEEDLE = "zxerasable"
HIS = "otterfive512"


async def _say(client: Client, text: str, user: str, **extra: Any) -> dict[str, Any]:
    body = {"conversation": "family", "text": text, "user": user, **extra}
    response = await client.post("/api/messages", json=body)
    assert response.status == 202, await response.text()
    accepted: dict[str, Any] = await response.json()
    return accepted


async def _turn_ends(client: Client, turn_id: int, status: str = "done") -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while True:
        turn: dict[str, Any] = await (await client.get(f"/api/console/turns/{turn_id}")).json()
        if turn["status"] == status:
            return turn
        assert time.monotonic() < deadline, turn
        await asyncio.sleep(0.05)


def _holding(conn: Connection, needle: str) -> list[str]:
    """Every table.column whose value holds ``needle`` (any case), over every column of
    every table the database has: the migrations' own and SQLite's full-text shadow
    tables included, blobs read as bytes."""
    found = []
    if conn.dialect.name == "sqlite":
        tables = conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'"))
        for (table,) in tables.all():
            for column in conn.execute(text(f'PRAGMA table_xinfo("{table}")')).all():
                name = column[1]
                hits = conn.execute(
                    text(
                        f'SELECT count(*) FROM "{table}" WHERE '
                        f'instr(lower(CAST("{name}" AS TEXT)), :n) > 0 '
                        f'OR instr(CAST("{name}" AS BLOB), CAST(:n AS BLOB)) > 0 '
                        f'OR instr(CAST("{name}" AS BLOB), CAST(:u AS BLOB)) > 0'
                    ),
                    {"n": needle, "u": needle.upper()},
                ).scalar_one()
                if hits:
                    found.append(f"{table}.{name}")
        return found
    columns = conn.execute(
        text(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public'"
        )
    ).all()
    for table, name in columns:
        hits = conn.execute(
            text(f'SELECT count(*) FROM "{table}" WHERE CAST("{name}" AS TEXT) ILIKE :n'),
            {"n": f"%{needle}%"},
        ).scalar_one()
        if hits:
            found.append(f"{table}.{name}")
    return found


async def test_forget_leaves_no_text_of_theirs_anywhere_and_totals_unchanged(
    make_client: ClientFactory,
    model_server: FakeModelServer,
    database_url: str,
    tmp_path: Path,
) -> None:
    """Alice's words go everywhere chatgate keeps things: her messages and the replies to
    them, a memory (and its full-text index), a schedule, a file (name, bytes, the copy in
    the file store), a tool call's arguments and result, an approval still pending, and
    the comment on her 👎. After ``forget``: none of it is anywhere (her rating is gone,
    Bob's 👍 on the same reply stays); Bob's message in the same conversation is;
    the usage totals are the same to the cent; the audit log holds the receipt."""
    with EchoServer() as echo:
        config = tmp_path / "chatgate.toml"
        config.write_text(f'[tools.http_request]\nallowed_hosts = ["{echo.entry}"]\n')
        model_server.script(
            tool_call("remember", {"fact": f"Alice's codeword is {HERS}", "about": "codeword"}),
            f"I will remember {HERS}.",
            tool_call(
                "schedule_task", {"prompt": f"remind alice of {HERS}", "schedule": "every 1h"}
            ),
            "Scheduled.",
            tool_call("http_request", {"method": "GET", "url": f"http://{echo.host}/{HERS}"}),
            "Fetched it.",
            "Read your notes.",
            f"Noted, {HIS}.",
            tool_call("http_request", {"method": "POST", "url": f"http://{echo.host}/{HERS}"}),
        )
        state = tmp_path / "state"
        client = await make_client(
            model_server, CHATGATE_CONFIG=str(config), CHATGATE_STATE_DIR=str(state)
        )
        for words in (f"remember {HERS}", f"schedule the {HERS} reminder", f"fetch {HERS}"):
            accepted = await _say(client, words, "alice")
            await _turn_ends(client, accepted["turn_id"])
        # A 👎 on the reply, and what went wrong: her words in the rating's comment.
        listed = await client.get(f"/api/conversations/{accepted['conversation_id']}/messages")
        [fetched] = [i for i in (await listed.json())["items"] if i["text"] == "Fetched it."]
        for who, rating in (("alice", "down"), ("bob", "up")):
            body = {"message_id": fetched["id"], "rating": rating, "user": who}
            assert (await client.post("/api/feedback", json=body)).status == 200
        answer = await _say(client, f"it missed the {HERS} page", "alice")
        assert answer["turn_id"] == 0
        form = {"file": f"{HERS} notes: the {HERS} plan".encode()}
        uploaded = await client.post(
            "/api/uploads",
            data={"file": io.BytesIO(form["file"])},
            headers={"X-Chatgate-Upload": "1"},
        )
        assert uploaded.status == 201, await uploaded.text()
        upload = await uploaded.json()
        accepted = await _say(
            client,
            "read my notes",
            "alice",
            attachments=[{"id": upload["id"], "name": f"{HERS}-notes.txt"}],
        )
        await _turn_ends(client, accepted["turn_id"])
        accepted = await _say(client, f"my word is {HIS}", "bob")
        await _turn_ends(client, accepted["turn_id"])
        waiting = await _say(client, f"post {HERS}", "alice")
        await _turn_ends(client, waiting["turn_id"], status="waiting")

    database = Database(database_url)
    try:
        before = set(await database.read(_holding, NEEDLE))
        everywhere = {"messages.text", "memories.fact", "schedules.prompt", "turn_steps.input",
                      "turn_steps.output", "approvals.arguments", "attachments.name",
                      "feedback.comment"}  # fmt: skip
        assert everywhere <= before
        usage = await (await client.get("/api/console/usage?by=user")).json()
        exported = await client.get("/api/console/export?user=web:alice")
        assert exported.status == 200
        assert "attachment" in exported.headers["Content-Disposition"]
        document = json.loads(await exported.text())
        assert any(HERS in m["text"] for m in document["messages"])
        assert HERS in document["memories"][0]["fact"]
        assert HERS in document["schedules"][0]["prompt"]
        assert document["files"][0]["name"] == f"{HERS}-notes.txt"
        assert [(f["rating"], HERS in (f["comment"] or "")) for f in document["feedback"]] == [
            ("down", True)
        ]
        assert HIS not in json.dumps(document)  # Bob's words are not Alice's

        refused = await client.post("/api/console/forget", json={"user": "web:alice"})
        assert refused.status == 400  # the id must be typed twice
        erased = await client.post(
            "/api/console/forget", json={"user": "web:alice", "confirm": "web:alice"}
        )
        assert erased.status == 200, await erased.text()
        receipt = await erased.json()
        assert receipt["memories"] == 1
        assert receipt["schedules"] == 1
        assert receipt["cancelled_approvals"] == 1
        assert receipt["files"] == 1
        assert receipt["ratings"] == 1

        assert await database.read(_holding, NEEDLE) == []
        assert "messages.text" in await database.read(_holding, HIS)
        after = await (await client.get("/api/console/usage?by=user")).json()
        assert after["totals"] == usage["totals"]
        assert after["items"] == usage["items"]
    finally:
        await database.dispose()
    stored = [p for p in (state).rglob("*") if p.is_file()]
    assert not [p for p in stored if NEEDLE.encode() in p.read_bytes()], stored
    audit = await (await client.get("/api/console/audit?action=person.erase")).json()
    assert audit["items"][0]["subject"] == "web:alice"
    assert audit["items"][0]["detail"]["messages"] == receipt["messages"]
    # What she asked that was still waiting is over, and nothing of hers runs.
    turn = await _turn_ends(client, waiting["turn_id"], status="failed")
    assert turn["error"] == "erased at the person's request"
    schedules = await (await client.get("/api/console/schedules")).json()
    assert schedules["items"] == []
    rated = await (await client.get("/api/console/feedback")).json()
    assert [(r["user"], r["rating"]) for r in rated["items"]] == [("web:bob", "up")]
    assert len(echo.requests) == 1  # the GET; the POST never ran


async def test_forget_me_in_the_web_chat(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    """``forget me`` in the web chat: the question carries Erase / Keep; Keep erases
    nothing, another person's press is refused (403), the asker's Erase replaces the
    question with the receipt; a message that is no question is 404."""
    model_server.script("Noted.")
    client = await make_client(model_server)
    accepted = await _say(client, "my bike is a plumcoat", "dana")
    await _turn_ends(client, accepted["turn_id"])
    question = await _question(client, accepted["conversation_id"], "dana")
    erase, keep = (c["value"] for c in question["choices"])
    path = f"/api/choices/{question['id']}"
    stranger = await client.post(path, json={"value": erase, "user": "eve"})
    assert stranger.status == 403
    assert (await client.post(path, json={"value": "y_1_2", "user": "dana"})).status == 404
    plain = await client.post(f"/api/choices/{accepted['message_id']}", json={"value": erase})
    assert plain.status == 404
    kept = await client.post(path, json={"value": keep, "user": "dana"})
    assert (await kept.json())["text"] == "Kept: nothing was erased."
    # Answered: the question is gone, its buttons with it.
    assert (await client.post(path, json={"value": erase, "user": "dana"})).status == 404
    found = await (await client.get("/api/console/conversations?q=plumcoat")).json()
    assert len(found["items"]) == 1

    question = await _question(client, accepted["conversation_id"], "dana")
    erase = question["choices"][0]["value"]
    erased = await client.post(
        f"/api/choices/{question['id']}", json={"value": erase, "user": "dana"}
    )
    assert erased.status == 200
    # Her three messages (two of them "forget me") and the reply to the first.
    assert "Erased web:dana's data: 4 messages" in (await erased.json())["text"]
    found = await (await client.get("/api/console/conversations?q=plumcoat")).json()
    assert found["items"] == []


async def _question(client: Client, conversation_id: str, user: str) -> dict[str, Any]:
    """Say ``forget me``; the question that answers it."""
    await _say(client, "forget me", user)
    deadline = time.monotonic() + 10
    while True:
        said = await (await client.get(f"/api/conversations/{conversation_id}/messages")).json()
        questions = [m for m in said["items"] if m.get("choices")]
        if questions:
            return dict(questions[-1])
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)


def columns_holding(database_url: str, needle: str) -> list[str]:
    """``_holding`` from a test that is not async, or from inside a running loop."""
    return read_database(database_url, _holding, needle)


async def test_forget_while_their_tool_runs_leaves_nothing_it_writes_after(
    make_client: ClientFactory, model_server: FakeModelServer, database_url: str, tmp_path: Path
) -> None:
    """Erased while a tool of their turn runs (a slow request that echoes their word): the
    turn is asked to stop, the tool finishes (a call is never cut in half) and journals its
    result, the turn stops at its next step, and the second pass, once it has, erases that
    result. Nothing of theirs remains; the model is not called again."""
    with EchoServer() as echo:
        config = tmp_path / "chatgate.toml"
        config.write_text(f'[tools.http_request]\nallowed_hosts = ["{echo.entry}"]\n')
        model_server.script(
            tool_call(
                "http_request",
                {"method": "GET", "url": f"http://{echo.host}/slow", "headers": {"X-Note": HERS}},
            ),
            "This answer must never be asked for.",
        )
        client = await make_client(model_server, CHATGATE_CONFIG=str(config))
        accepted = await _say(client, f"look up {HERS}", "frank")
        deadline = time.monotonic() + 20
        while not echo.requests:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        erased = await client.post(
            "/api/console/forget", json={"user": "web:frank", "confirm": "web:frank"}
        )
        assert erased.status == 200
        receipt = await erased.json()
    assert receipt["running_turns"] == 0  # it had stopped before the second pass
    turn = await _turn_ends(client, accepted["turn_id"], status="failed")
    assert turn["stopped_by"] == "console:operator"
    assert len(model_server.requests) == 1
    assert columns_holding(database_url, NEEDLE) == []

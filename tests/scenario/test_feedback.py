"""Reactions as feedback: 👍/👎 on the agent's replies are kept with the turn and the person,
on every platform (the real slack-bolt, python-telegram-bot and discord.py against the fake
platforms, and the web chat's own buttons); a 👎 asks once what went wrong, and the answer
is kept with the rating, never sent to the model."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from agent_core.events import utcnow
from agent_core.feedback import QUESTION, THANKS
from agent_core.storage.database import Database
from agent_core.storage.schema import feedback, messages
from tests.fakes.database_reads import read_database
from tests.fakes.discord_server import CHANNEL, FakeDiscord
from tests.fakes.gateway import GatewayProcess
from tests.fakes.model_server import FakeModelServer
from tests.fakes.slack_server import BOT_USER, TEAM, FakeSlack, posted_ts
from tests.fakes.telegram_server import BOT_ID, BOT_USERNAME, FakeTelegram
from tests.scenario.conftest import ClientFactory
from tests.scenario.test_slack import _mention, _post_event

Client = TestClient[Any, Any]
Rated = tuple[str, str, str | None, bool]


def _ratings(conn: Connection) -> list[Rated]:
    """(person, rating, comment, asked) of every rating, oldest first."""
    rows = conn.execute(select(feedback).order_by(feedback.c.id)).all()
    return [(r.user_id, r.rating, r.comment, r.asked_at is not None) for r in rows]


def _until(condition: Callable[[], Any], timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)
    return found


def _settled(database_url: str, expected: list[Rated]) -> None:
    """The ratings become ``expected`` (reactions are kept in the background)."""
    deadline = time.monotonic() + 20
    while (found := read_database(database_url, _ratings)) != expected:
        assert time.monotonic() < deadline, found
        time.sleep(0.05)


def _unchanged(database_url: str, expected: list[Rated], seconds: float = 1.0) -> None:
    """Nothing changes the ratings for a while (a reaction that counts for nothing)."""
    time.sleep(seconds)
    assert read_database(database_url, _ratings) == expected


# -- the web chat ----------------------------------------------------------------------------


async def _say(client: Client, text: str, user: str = "local") -> dict[str, Any]:
    response = await client.post(
        "/api/messages", json={"conversation": "rated", "text": text, "user": user}
    )
    assert response.status == 202, await response.text()
    accepted: dict[str, Any] = await response.json()
    return accepted


async def _items(client: Client, conversation_id: str) -> list[dict[str, Any]]:
    response = await client.get(f"/api/conversations/{conversation_id}/messages")
    items: list[dict[str, Any]] = (await response.json())["items"]
    return items


async def _rate(client: Client, message_id: object, rating: object, **extra: Any) -> Any:
    response = await client.post(
        "/api/feedback", json={"message_id": message_id, "rating": rating, **extra}
    )
    return response.status, await response.json()


async def _answered(
    client: Client, conversation_id: str, text: str, *, within: bool = False
) -> dict[str, Any]:
    """The latest item whose text is ``text`` (holds it, ``within``), once it is there."""
    deadline = time.monotonic() + 20
    while True:
        items = await _items(client, conversation_id)
        found = [i for i in items if i["text"] == text or (within and text in i["text"])]
        if found:
            return found[-1]
        assert time.monotonic() < deadline, text
        await asyncio.sleep(0.05)


async def test_web_buttons_rate_ask_once_and_keep_the_answer_from_the_model(
    make_client: ClientFactory, model_server: FakeModelServer, database_url: str
) -> None:
    """👍 is kept; 👎 replaces it and asks in the conversation what went wrong; the next
    message is the comment (no turn, no model request) and is acknowledged; flipping back
    and forth, or taking the 👎 off and putting it back, asks no second time; null takes
    the rating off. The reply carries who rated it; the console shows the turn's ratings
    and lists rated turns; ``/usage`` counts them; bad bodies are 400, other messages 404."""
    model_server.script("It is 12 degrees.")
    client = await make_client(model_server)
    accepted = await _say(client, "weather?")
    conversation = accepted["conversation_id"]
    reply = await _answered(client, conversation, "It is 12 degrees.")
    assert reply["rateable"] is True
    assert reply["ratings"] == {}
    [question] = [i for i in await _items(client, conversation) if i["role"] == "user"]
    assert "rateable" not in question

    assert await _rate(client, reply["id"], "up") == (
        200,
        {"message_id": reply["id"], "turn_id": accepted["turn_id"], "rating": "up"},
    )
    assert (await _rate(client, reply["id"], "down"))[1]["rating"] == "down"
    asked = await _answered(client, conversation, QUESTION)
    assert asked["role"] == "system"
    answer = await _say(client, "the temperature was in Fahrenheit")
    assert answer["turn_id"] == 0
    await _answered(client, conversation, THANKS)
    assert len(model_server.requests) == 1
    expected = [("web:local", "down", "the temperature was in Fahrenheit", True)]
    assert read_database(database_url, _ratings) == expected

    for rating in ("up", "down", None, "down"):
        assert (await _rate(client, reply["id"], rating))[0] == 200
    texts = [i["text"] for i in await _items(client, conversation)]
    assert texts.count(QUESTION) == 1
    assert read_database(database_url, _ratings) == [("web:local", "down", None, False)]
    reply = await _answered(client, conversation, "It is 12 degrees.")
    assert reply["ratings"] == {"web:local": "down"}

    timeline = await (await client.get(f"/api/console/turns/{accepted['turn_id']}")).json()
    assert [(f["user"], f["rating"]) for f in timeline["feedback"]] == [("web:local", "down")]
    assert (await _rate(client, reply["id"], "up", user="bob"))[0] == 200
    rated = await (await client.get("/api/console/feedback?rating=down")).json()
    assert [(r["user"], r["turn_id"]) for r in rated["items"]] == [
        ("web:local", accepted["turn_id"])
    ]
    every = await (await client.get("/api/console/feedback")).json()
    assert [r["user"] for r in every["items"]] == ["web:bob", "web:local"]
    assert (await client.get("/api/console/feedback?rating=meh")).status == 400
    usage = await (await client.get("/api/console/usage")).json()
    assert usage["feedback"] == {"up": 1, "down": 1}
    await _say(client, "/usage")
    counted = await _answered(client, conversation, "replies rated", within=True)
    assert "replies rated 👍 1, 👎 1." in counted["text"]

    for body in ({}, {"message_id": "1", "rating": "up"}, {"message_id": 1, "rating": "meh"},
                 {"message_id": True, "rating": "up"}, {"message_id": 2**63, "rating": None},
                 {"message_id": 1, "rating": "up", "user": "no spaces"}):  # fmt: skip
        response = await client.post("/api/feedback", json=body)
        assert response.status == 400, body
    assert (await _rate(client, question["id"], "up"))[0] == 404
    assert (await _rate(client, 2**62, "up"))[0] == 404
    bad = await client.post(
        "/api/feedback", data=b"\xff{", headers={"Content-Type": "application/json"}
    )
    assert bad.status == 400


async def test_skip_ends_the_wait_and_keeps_no_comment(
    make_client: ClientFactory, model_server: FakeModelServer, database_url: str
) -> None:
    """ "skip" answers the question with nothing: the message after it is a turn again."""
    model_server.script("First answer.", "Second answer.")
    client = await make_client(model_server)
    accepted = await _say(client, "one")
    reply = await _answered(client, accepted["conversation_id"], "First answer.")
    await _rate(client, reply["id"], "down")
    await _answered(client, accepted["conversation_id"], QUESTION)
    assert (await _say(client, "skip"))["turn_id"] == 0
    await _answered(client, accepted["conversation_id"], "OK, skipped.")
    assert (await _say(client, "two"))["turn_id"] != 0
    await _answered(client, accepted["conversation_id"], "Second answer.")
    assert read_database(database_url, _ratings) == [("web:local", "down", "", True)]
    assert model_server.user_texts()[-1] == "two"


async def test_only_the_newest_thumbs_down_waits_and_a_thumbs_up_ends_the_wait(
    make_client: ClientFactory, model_server: FakeModelServer, database_url: str
) -> None:
    """Two 👎 ask twice, but only the newest question waits: the next message answers it
    and the one after is a turn. A 👎 turned 👍 takes nothing: the next message is a turn.
    A 👎 on a reply older than a day is kept and asks nothing. A user name with a
    trailing newline is refused."""
    model_server.script("One.", "Two.", "Three.", "Four.", "Five.")
    client = await make_client(model_server)
    replies = []
    for text, answer in (("a", "One."), ("b", "Two.")):
        accepted = await _say(client, text)
        replies.append(await _answered(client, accepted["conversation_id"], answer))
    conversation = accepted["conversation_id"]
    for reply in replies:
        assert (await _rate(client, reply["id"], "down"))[0] == 200
    texts = [i["text"] for i in await _items(client, conversation)]
    assert texts.count(QUESTION) == 2
    assert (await _say(client, "the second was wrong"))["turn_id"] == 0
    third = await _say(client, "c")
    assert third["turn_id"] != 0
    await _answered(client, conversation, "Three.")
    assert read_database(database_url, _ratings) == [
        ("web:local", "down", "", True),
        ("web:local", "down", "the second was wrong", True),
    ]

    fourth = await _say(client, "d")
    reply = await _answered(client, conversation, "Four.")
    assert (await _rate(client, reply["id"], "down"))[0] == 200
    await _until_text_count(client, conversation, QUESTION, 3)
    assert (await _rate(client, reply["id"], "up"))[0] == 200
    assert (await _say(client, "e"))["turn_id"] != 0
    await _answered(client, conversation, "Five.")
    assert model_server.user_texts()[-1] == "e"
    assert fourth["turn_id"] != 0

    def age(conn: Connection) -> None:
        conn.execute(
            update(messages)
            .where(messages.c.id == replies[0]["id"])
            .values(created_at=utcnow() - timedelta(days=2))
        )

    await _write(database_url, age)
    assert (await _rate(client, replies[0]["id"], None))[0] == 200
    assert (await _rate(client, replies[0]["id"], "up", user="carol"))[0] == 200
    assert (await _rate(client, replies[0]["id"], "down", user="carol"))[0] == 200
    texts = [i["text"] for i in await _items(client, conversation)]
    assert texts.count(QUESTION) == 3
    assert ("web:carol", "down", None, False) in read_database(database_url, _ratings)
    response = await client.post(
        "/api/feedback", json={"message_id": replies[0]["id"], "rating": "up", "user": "ann\n"}
    )
    assert response.status == 400


async def _until_text_count(client: Client, conversation_id: str, text: str, count: int) -> None:
    deadline = time.monotonic() + 20
    while [i["text"] for i in await _items(client, conversation_id)].count(text) < count:
        assert time.monotonic() < deadline, text
        await asyncio.sleep(0.05)


async def _write(database_url: str, fn: Callable[[Connection], None]) -> None:
    database = Database(database_url)
    try:
        await database.write(fn)
    finally:
        await database.dispose()


# -- Slack, Telegram and Discord -------------------------------------------------------------


def _process(database_url: str, tmp_path: Path, *, allow: str, **settings: str) -> GatewayProcess:
    """A gateway where only ``allow`` may talk to the agent (everyone else is a stranger)."""
    return GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_ACCESS="allowlist",
        CHATGATE_ALLOW=allow,
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        **settings,
    )


def _slack_reaction(
    emoji: str, *, ts: str, user: str = "U0ALICE", author: str = BOT_USER, added: bool = True
) -> dict[str, Any]:
    return {
        "token": "unused",
        "team_id": TEAM,
        "api_app_id": "A0CHATGATE",
        "type": "event_callback",
        "event_id": f"Ev{time.monotonic_ns()}",
        "event_time": int(time.time()),
        "event": {
            "type": "reaction_added" if added else "reaction_removed",
            "user": user,
            "reaction": emoji,
            "item_user": author,
            "item": {"type": "message", "channel": "C0GENERAL", "ts": ts},
            "event_ts": f"{time.time():.6f}",
        },
    }


@pytest.mark.any_database
def test_slack_reactions_rate_the_bots_reply_and_a_thumbs_down_asks_once(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> None:
    """Through slack-bolt: a stranger's 👎 and a 👍 on someone's own message change nothing;
    Alice's 👍 is kept, her 👎 replaces it and asks in the thread; taking the 👍 off leaves
    the 👎; her thread reply is the comment (no model request) and is acknowledged; taking
    the 👎 off removes the rating, and putting it back (another skin tone) asks no more."""
    process = _process(
        database_url,
        tmp_path,
        allow="slack:U0ALICE",
        **slack.settings(),
        **model_server.settings(),
    )
    process.start()
    try:
        model_server.script("The build is green.")
        thread = "1700000300.000100"
        assert _post_event(process, _mention("how is the build?", ts=thread))[0] == 200
        slack.wait_for("chat.postMessage", 1)
        reply = posted_ts(1)
        for event in (
            _slack_reaction("-1", ts=reply, user="U0MALLORY"),
            _slack_reaction("+1", ts=thread, author="U0ALICE"),
            _slack_reaction("+1", ts="1700000999.000100"),
            _slack_reaction("tada", ts=reply),
        ):
            assert _post_event(process, event)[0] == 200
        _unchanged(database_url, [])
        assert _post_event(process, _slack_reaction("+1::skin-tone-3", ts=reply))[0] == 200
        _settled(database_url, [("slack:U0ALICE", "up", None, False)])
        assert _post_event(process, _slack_reaction("thumbsdown", ts=reply))[0] == 200
        question = slack.wait_for("chat.postMessage", 2)[1]
        assert (question["text"], question["thread_ts"]) == (QUESTION, thread)
        removed = _slack_reaction("+1", ts=reply, added=False)
        assert _post_event(process, removed)[0] == 200
        _unchanged(database_url, [("slack:U0ALICE", "down", None, True)])
        answer = _mention("it is red since noon", ts="1700000400.000100")
        answer["event"] |= {"type": "message", "text": "it is red since noon", "thread_ts": thread}
        assert _post_event(process, answer)[0] == 200
        thanks = slack.wait_for("chat.postMessage", 3)[2]
        assert (thanks["text"], thanks["thread_ts"]) == (THANKS, thread)
        _settled(database_url, [("slack:U0ALICE", "down", "it is red since noon", True)])
        assert len(model_server.requests) == 1
        removed = _slack_reaction("thumbsdown", ts=reply, added=False)
        assert _post_event(process, removed)[0] == 200
        _settled(database_url, [])
        assert _post_event(process, _slack_reaction("-1::skin-tone-2", ts=reply))[0] == 200
        _settled(database_url, [("slack:U0ALICE", "down", None, False)])
        time.sleep(1)
        assert len(slack.posted()) == 3
        assert (
            _post_event(process, {"type": "event_callback", "event": {"type": "reaction_added"}})[0]
            == 400
        )
    finally:
        process.stop()


GROUP = -1001987654321
ALICE = 5551234
MALLORY = 6660000


@pytest.mark.any_database
def test_reactions_count_against_their_persons_message_rate(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> None:
    """A reaction spends from its person's rate as a message does: over it, a 👎 changes
    nothing and posts no question (nobody can make the agent post for every old reply)."""
    process = _process(
        database_url,
        tmp_path,
        allow="slack:U0ALICE",
        CHATGATE_RATE_BURST="2",
        CHATGATE_RATE_PER_MINUTE="0.5",
        **slack.settings(),
        **model_server.settings(),
    )
    process.start()
    try:
        model_server.script("The build is green.")
        thread = "1700000500.000100"
        assert _post_event(process, _mention("how is the build?", ts=thread))[0] == 200
        slack.wait_for("chat.postMessage", 1)
        reply = posted_ts(1)
        assert _post_event(process, _slack_reaction("+1", ts=reply))[0] == 200
        _settled(database_url, [("slack:U0ALICE", "up", None, False)])
        assert _post_event(process, _slack_reaction("-1", ts=reply))[0] == 200
        _unchanged(database_url, [("slack:U0ALICE", "up", None, False)])
        assert len(slack.posted()) == 1
    finally:
        process.stop()


def _telegram_reaction(
    message_id: int, old: list[str], new: list[str], *, user: int = ALICE
) -> dict[str, Any]:
    return {
        "message_reaction": {
            "chat": {"id": GROUP, "type": "supergroup", "title": "ops"},
            "message_id": message_id,
            "user": {"id": user, "is_bot": False, "first_name": "Someone"},
            "date": int(time.time()),
            "old_reaction": [{"type": "emoji", "emoji": e} for e in old],
            "new_reaction": [{"type": "emoji", "emoji": e} for e in new],
        }
    }


def _telegram_text(
    text: str, *, message_id: int, reply_to: dict[str, Any] | None = None
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "message_id": message_id,
        "date": int(time.time()),
        "chat": {"id": GROUP, "type": "supergroup", "title": "ops"},
        "from": {"id": ALICE, "is_bot": False, "first_name": "Alice"},
        "text": text,
    }
    if reply_to is not None:
        message["reply_to_message"] = reply_to
    else:
        mention = f"@{BOT_USERNAME}"
        message["text"] = f"{mention} {text}"
        message["entities"] = [{"offset": 0, "length": len(mention), "type": "mention"}]
    return {"message": message}


@pytest.mark.any_database
def test_telegram_reactions_arrive_by_polling_and_rate_the_bots_reply(
    database_url: str, model_server: FakeModelServer, telegram: FakeTelegram, tmp_path: Path
) -> None:
    """Long polling asks for ``message_reaction`` (the fake, like Telegram, sends none
    otherwise): a stranger's 👎 and a 👍 on Alice's own message change nothing; her 👍 is
    kept, changing it to 👎 asks once in reply to the rated message; her reply to the
    question is the comment (no model request); an emptied reaction removes the rating,
    and 👎 again asks no more."""
    process = _process(
        database_url,
        tmp_path,
        allow=f"telegram:{ALICE}",
        **telegram.settings(webhook=False),
        **model_server.settings(),
    )
    process.start()
    try:
        model_server.script("Disk is at 80%.")
        telegram.queue_update(_telegram_text("disk?", message_id=70))
        telegram.wait_for("sendMessage", 1)
        rated = int(telegram.delivered[0]["message_id"])
        telegram.queue_update(_telegram_reaction(rated, [], ["👎"], user=MALLORY))
        telegram.queue_update(_telegram_reaction(70, [], ["👍"]))
        telegram.queue_update(_telegram_reaction(rated, [], ["🔥"]))
        _unchanged(database_url, [], seconds=1.5)
        telegram.queue_update(_telegram_reaction(rated, ["🔥"], ["👍"]))
        _settled(database_url, [(f"telegram:{ALICE}", "up", None, False)])
        telegram.queue_update(_telegram_reaction(rated, ["👍"], ["👎"]))
        question = telegram.wait_for("sendMessage", 2)[1]
        assert question["text"] == QUESTION
        assert question["reply_parameters"]["message_id"] == rated
        asked = telegram.delivered[1]
        bot = {"id": BOT_ID, "is_bot": True, "first_name": "chatgate"}
        telegram.queue_update(
            _telegram_text("it is 95%", message_id=71, reply_to={**asked, "from": bot})
        )
        assert telegram.wait_for("sendMessage", 3)[2]["text"] == THANKS
        _settled(database_url, [(f"telegram:{ALICE}", "down", "it is 95%", True)])
        assert len(model_server.requests) == 1
        telegram.queue_update(_telegram_reaction(rated, ["👎"], []))
        _settled(database_url, [])
        telegram.queue_update(_telegram_reaction(rated, [], ["👎🏻"]))
        _settled(database_url, [(f"telegram:{ALICE}", "down", None, False)])
        time.sleep(1)
        assert len(telegram.called("sendMessage")) == 3
    finally:
        process.stop()


DISCORD_ALICE = "301234567890123456"
DISCORD_MALLORY = "309999999999999999"


@pytest.mark.any_database
def test_discord_reactions_rate_the_bots_reply_and_a_thumbs_down_asks_once(
    database_url: str, model_server: FakeModelServer, discord: FakeDiscord, tmp_path: Path
) -> None:
    """Over the gateway (reaction intents asked for): a stranger's 👎 and a 👍 on Alice's
    own message change nothing; her 👍 is kept; her 👎 replaces it and asks once, replying
    to the rated message; her answer is the comment (no model request); removing the 👍
    leaves the 👎, removing the 👎 removes the rating, and adding it again asks no more."""
    process = _process(
        database_url,
        tmp_path,
        allow=f"discord:{DISCORD_ALICE}",
        **discord.settings(),
        **model_server.settings(),
    )
    process.start()
    try:
        discord.wait_connected()
        intents = discord.identified[0]["intents"]
        assert intents & (1 << 10)  # guild reactions
        assert intents & (1 << 13)  # DM reactions
        model_server.script("Queue is empty.")
        mine = discord.message_create("queue?", author=DISCORD_ALICE, mention=True)
        reply = _until(lambda: list(discord.created))[0]
        discord.react(reply, "👎", reactor=DISCORD_MALLORY)
        discord.react(mine, "👍", reactor=DISCORD_ALICE)
        discord.react(reply, "🎉", reactor=DISCORD_ALICE)
        _unchanged(database_url, [])
        discord.react(reply, "👍🏽", reactor=DISCORD_ALICE)
        _settled(database_url, [(f"discord:{DISCORD_ALICE}", "up", None, False)])
        discord.react(reply, "👎", reactor=DISCORD_ALICE)
        question = _until(lambda: discord.created[1:])[0]
        assert question["content"] == QUESTION
        assert question["message_reference"]["message_id"] == int(reply["id"])
        discord.react(reply, "👍🏽", reactor=DISCORD_ALICE, added=False)
        _unchanged(database_url, [(f"discord:{DISCORD_ALICE}", "down", None, True)])
        discord.message_create("it has 40 jobs", author=DISCORD_ALICE, mention=True)
        assert _until(lambda: discord.created[2:])[0]["content"] == THANKS
        _settled(database_url, [(f"discord:{DISCORD_ALICE}", "down", "it has 40 jobs", True)])
        assert len(model_server.requests) == 1
        discord.react(reply, "👎", reactor=DISCORD_ALICE, added=False)
        _settled(database_url, [])
        discord.react(reply, "👎", reactor=DISCORD_ALICE)
        _settled(database_url, [(f"discord:{DISCORD_ALICE}", "down", None, False)])
        time.sleep(1)
        assert len(discord.created) == 3
        assert discord.created[0]["channel_id"] == CHANNEL
    finally:
        process.stop()

"""The store on a real database: ledger dedupe, leases, journal and history."""

from __future__ import annotations

import asyncio

from agent_core.events import InboundMessage
from agent_core.storage import ledger
from agent_core.storage.database import Database
from agent_core.storage.store import Store


def _message(event_id: str, *, channel: str = "general", text: str = "hi") -> InboundMessage:
    return InboundMessage(
        platform="web",
        workspace="local",
        channel=channel,
        user="web:local",
        text=text,
        platform_event_id=event_id,
    )


async def test_a_duplicate_event_returns_the_first_turn(database: Database) -> None:
    """Same platform event id twice: one message, one turn, second marked duplicate."""
    store = Store(database)
    first = await store.accept_inbound(_message("e1"))
    again = await store.accept_inbound(_message("e1", text="different body, same event"))
    assert not first.duplicate
    assert again.duplicate
    assert (again.turn_id, again.message_id) == (first.turn_id, first.message_id)
    assert await store.open_turn_count() == 1
    assert len(await store.messages_after(first.conversation_id)) == 1


async def test_concurrent_duplicates_make_one_turn(database: Database) -> None:
    """Ten simultaneous deliveries of one event (a retry storm) make exactly one turn."""
    store = Store(database)
    results = await asyncio.gather(*(store.accept_inbound(_message("storm")) for _ in range(10)))
    assert sum(not r.duplicate for r in results) == 1
    assert len({r.turn_id for r in results}) == 1
    assert await store.open_turn_count() == 1


async def test_same_event_id_on_another_platform_is_not_a_duplicate(database: Database) -> None:
    """The ledger key is (platform, event id)."""
    store = Store(database)
    web = await store.accept_inbound(_message("1"))
    slack = InboundMessage(
        platform="slack",
        workspace="T",
        channel="C",
        user="slack:U",
        text="hi",
        platform_event_id="1",
    )
    other = await store.accept_inbound(slack)
    assert not other.duplicate
    assert other.turn_id != web.turn_id


async def test_which_events_are_ledgered_already(database: Database) -> None:
    """What a catch-up asks before offering what it read again: the ledgered ids among
    many (more than one read's worth), on this platform only."""
    store = Store(database)
    for event_id in ("7", "512", "900"):
        await store.accept_inbound(_message(event_id))
    asked = [str(n) for n in range(1200)]
    assert await store.ledgered_among("web", asked) == {"7", "512", "900"}
    assert await store.ledgered_among("slack", asked) == set()
    assert await store.ledgered_among("web", []) == set()


async def test_conversations_are_keyed_by_channel_and_thread(database: Database) -> None:
    """Two messages in one channel share a conversation; another channel gets its own."""
    store = Store(database)
    a = await store.accept_inbound(_message("1", channel="a"))
    b = await store.accept_inbound(_message("2", channel="a"))
    c = await store.accept_inbound(_message("3", channel="b"))
    assert a.conversation_id == b.conversation_id != c.conversation_id
    listed = [conv.key.channel for conv in await store.list_conversations(platform="web")]
    assert sorted(listed) == ["a", "b"]


async def test_lease_is_exclusive_until_it_expires(database: Database) -> None:
    """A live lease keeps others out; an expired one can be taken over; release frees it."""
    store = Store(database)
    conversation = (await store.accept_inbound(_message("1"))).conversation_id
    assert await _claim(store, conversation, owner="a", ttl=30)
    assert not await _claim(store, conversation, owner="b", ttl=30)
    assert await _claim(store, conversation, owner="a", ttl=30)  # renewal
    assert await store.renew_lease(conversation, owner="a", ttl=30)
    assert not await store.renew_lease(conversation, owner="b", ttl=30)
    assert await store.conversations_needing_work() == []
    await store.release_lease(conversation, owner="b")  # not the holder: no effect
    assert not await _claim(store, conversation, owner="b", ttl=30)
    await store.release_lease(conversation, owner="a")
    assert not await store.renew_lease(conversation, owner="a", ttl=30)  # never re-takes
    assert await store.conversations_needing_work() == [conversation]
    assert await _claim(store, conversation, owner="b", ttl=1)
    await asyncio.sleep(1.1)
    assert await store.conversations_needing_work() == [conversation]
    assert await _claim(store, conversation, owner="c", ttl=30)


async def test_open_turns_come_out_oldest_first(database: Database) -> None:
    """begin_next_turn starts turns in arrival order, counts attempts, skips finished ones."""
    store = Store(database)
    first = await store.accept_inbound(_message("1", text="one"))
    second = await store.accept_inbound(_message("2", text="two"))
    conversation = first.conversation_id
    assert await _claim(store, conversation, owner="me", ttl=30)
    turn = await store.begin_next_turn(conversation)
    assert turn is not None
    assert (turn.id, turn.trigger_text, turn.attempts) == (first.turn_id, "one", 0)
    again = await store.begin_next_turn(conversation)
    assert again is not None
    assert (again.id, again.attempts) == (first.turn_id, 1)
    await store.finish_turn(first.turn_id, status="done", error=None)
    turn = await store.begin_next_turn(conversation)
    assert turn is not None
    assert turn.id == second.turn_id
    await store.finish_turn(second.turn_id, status="done", error=None)
    assert await store.begin_next_turn(conversation) is None


async def test_reply_intent_and_receipt_are_journaled(database: Database) -> None:
    """The reply's message and its step are written together; the receipt completes both."""
    store = Store(database)
    accepted = await store.accept_inbound(_message("1"))
    turn = await store.start_turn(accepted.turn_id)
    await store.record_reply_intent(
        turn, 2, role="assistant", text="hello", delivery_key=f"{turn.id}:2"
    )
    step = (await store.load_turn(turn.id)).step(2)
    assert step is not None
    assert step.status == "started"
    assert step.kind == "reply"
    await store.record_reply_sent(turn.id, 2, receipt="R1")
    step = (await store.load_turn(turn.id)).step(2)
    assert step is not None
    assert step.status == "done"
    assert step.output == {"receipt": "R1"}
    items = await store.messages_after(accepted.conversation_id)
    assert [(m.role, m.text, m.platform_message_id) for m in items] == [
        ("user", "hi", None),
        ("assistant", "hello", "R1"),
    ]
    history = await store.history(accepted.conversation_id, before_turn_id=10**9, limit=10)
    assert [m.text for m in history] == ["hi", "hello"]


async def _claim(store: Store, conversation_id: str, *, owner: str, ttl: float) -> bool:
    """Take (or renew) the conversation's lease as another process would."""
    return await store.database.write(ledger.claim, conversation_id, owner=owner, ttl=ttl)

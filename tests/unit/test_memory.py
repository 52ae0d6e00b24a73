"""Memories in the store: full-text recall scoped to the person (or the conversation),
newer facts about the same thing superseding older ones, and forget."""

from __future__ import annotations

from agent_core.events import InboundMessage
from agent_core.storage.database import Database
from agent_core.storage.store import Store


async def _conversation(store: Store, channel: str, user: str) -> str:
    event = InboundMessage(
        platform="web",
        workspace="local",
        channel=channel,
        user=user,
        text="hi",
        platform_event_id=f"{channel}:{user}",
    )
    accepted = await store.accept_inbound(event, open_turn=False)
    return accepted.conversation_id


async def test_a_persons_fact_is_recalled_in_their_other_conversations_only(
    database: Database,
) -> None:
    store = Store(database)
    first = await _conversation(store, "one", "web:alice")
    second = await _conversation(store, "two", "web:alice")
    bobs = await _conversation(store, "three", "web:bob")
    await store.remember(
        user="web:alice",
        conversation_id=first,
        scope="user",
        fact="Alice's deploy window is Thursday 14:00 UTC",
        about="deploy window",
        source="test",
    )
    await store.remember(
        user="web:alice",
        conversation_id=first,
        scope="conversation",
        fact="This channel tracks the Thursday deploy checklist",
        about=None,
        source="test",
    )
    found = await store.recall(user="web:alice", conversation_id=second, query="deploy window?")
    assert [m.fact for m in found] == ["Alice's deploy window is Thursday 14:00 UTC"]
    here = await store.recall(user="web:alice", conversation_id=first, query="thursday deploy")
    assert len(here) == 2
    assert await store.recall(user="web:bob", conversation_id=bobs, query="deploy window") == []
    assert await store.recall(user="web:alice", conversation_id=second, query="?!") == []


async def test_a_newer_fact_about_the_same_thing_supersedes_and_forget_forgets(
    database: Database,
) -> None:
    store = Store(database)
    conversation = await _conversation(store, "one", "web:alice")
    old, _ = await store.remember(
        user="web:alice",
        conversation_id=conversation,
        scope="user",
        fact="favourite editor is emacs",
        about="favourite editor",
        source="test",
    )
    new, replaced = await store.remember(
        user="web:alice",
        conversation_id=conversation,
        scope="user",
        fact="favourite editor is now vim",
        about="favourite editor",
        source="test",
    )
    assert replaced == 1
    found = await store.recall(user="web:alice", conversation_id=conversation, query="editor")
    assert [m.id for m in found] == [new]
    assert not await store.forget(user="web:bob", conversation_id="elsewhere", memory_id=new)
    assert await store.forget(user="web:alice", conversation_id=conversation, memory_id=new)
    assert await store.recall(user="web:alice", conversation_id=conversation, query="editor") == []
    assert old != new


async def test_in_a_shared_conversation_a_persons_facts_stay_theirs(database: Database) -> None:
    """B, in the group where A told the agent something personal, can neither recall nor
    forget it; a conversation fact is shared there, forgotten by its maker or an admin."""
    store = Store(database)
    group = await _conversation(store, "team", "web:alice")
    personal, _ = await store.remember(
        user="web:alice",
        conversation_id=group,
        scope="user",
        fact="Alice's home address is 12 Elm Street",
        about="home address",
        source="test",
    )
    shared, _ = await store.remember(
        user="web:alice",
        conversation_id=group,
        scope="conversation",
        fact="The team's release train leaves on Elm day",
        about=None,
        source="test",
    )
    seen_by_bob = await store.recall(user="web:bob", conversation_id=group, query="elm")
    assert [m.id for m in seen_by_bob] == [shared]
    assert not await store.forget(user="web:bob", conversation_id=group, memory_id=personal)
    assert not await store.forget(user="web:bob", conversation_id=group, memory_id=shared)
    assert not await store.forget(
        user="web:boss", conversation_id=group, memory_id=personal, admin=True
    )
    assert await store.forget(user="web:boss", conversation_id=group, memory_id=shared, admin=True)
    mine = await store.recall(user="web:alice", conversation_id="elsewhere", query="elm")
    assert [m.id for m in mine] == [personal]
    assert await store.forget(user="web:alice", conversation_id="elsewhere", memory_id=personal)

"""A person's message deleted on its platform: the transaction behind
``Store.forget_message``."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import or_, select, update
from sqlalchemy.engine import Connection

from agent_core.events import ConversationKey
from agent_core.storage import audit
from agent_core.storage.schema import conversations, memories, messages, turns

DELETED_BEFORE_ANSWER = "its message was deleted before it was answered"


def forget_message(
    conn: Connection, key: ConversationKey, message_id: str, *, now: datetime
) -> int:
    """The person's message with this platform id, in this channel (this thread, when
    ``key`` names one): its text and quote gone and it out of the history the model sees;
    its turn, if not started, ended unanswered; the memories drawn from its turn
    forgotten. Returns how many messages it found (0: not one of ours, or gone already)."""
    query = (
        select(messages.c.id, messages.c.turn_id, messages.c.conversation_id, messages.c.author)
        .join(conversations, conversations.c.id == messages.c.conversation_id)
        .where(
            conversations.c.platform == key.platform,
            conversations.c.workspace == key.workspace,
            # A thread's message names the thread as its channel where threads are
            # channels (Discord).
            or_(conversations.c.channel == key.channel, conversations.c.thread == key.channel),
            messages.c.platform_message_id == message_id,
            messages.c.role == "user",
            messages.c.deleted_at.is_(None),
        )
    )
    if key.thread is not None:
        query = query.where(conversations.c.thread == key.thread)
    found = conn.execute(query).all()
    for row in found:
        conn.execute(
            update(messages)
            .where(messages.c.id == row.id)
            .values(text="", quote=None, deleted_at=now)
        )
        forgotten = 0
        if row.turn_id is not None:
            conn.execute(
                update(turns)
                .where(turns.c.id == row.turn_id, turns.c.status == "pending")
                .values(status="failed", error=DELETED_BEFORE_ANSWER, finished_at=now)
            )
            forgotten = conn.execute(
                update(memories)
                .where(
                    memories.c.forgotten_at.is_(None),
                    or_(
                        memories.c.source == f"remember in turn {row.turn_id}",
                        memories.c.source.like(f"extracted from turn {row.turn_id} on %"),
                    ),
                )
                .values(forgotten_at=now)
            ).rowcount
        audit.append(
            conn, actor=row.author or "platform", action="message.delete",
            subject=str(row.id), conversation_id=row.conversation_id, turn_id=row.turn_id,
            detail={"memories_forgotten": forgotten}, now=now,
        )  # fmt: skip
    return len(found)

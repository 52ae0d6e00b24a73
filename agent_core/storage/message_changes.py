"""A person's message deleted or edited on its platform: the transactions behind
``Store.forget_message`` and ``Store.edit_message``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, TypeAlias

from sqlalchemy import or_, select, update
from sqlalchemy.engine import Connection, Row

from agent_core.events import ConversationKey
from agent_core.storage import audit
from agent_core.storage.erasure import strip_steps
from agent_core.storage.schema import conversations, ingress, memories, messages, turns

DELETED_BEFORE_ANSWER = "its message was deleted before it was answered"
EditOutcome: TypeAlias = Literal["replaced", "running", "noted"]
_SHOWN = 300
_NOTED = "\n[edited after it was answered; it first said: "


def forget_message(
    conn: Connection, key: ConversationKey, message_id: str, *, now: datetime
) -> int:
    """The person's message with this platform id, in this channel (this thread, when
    ``key`` names one): its text and quote gone and it out of the history the model sees;
    its turn, if not started, ended unanswered; the memories drawn from its turn
    forgotten. Returns how many messages it found (0: not one of ours, or gone already)."""
    found = _theirs(conn, key, message_id)
    for row in found:
        conn.execute(
            update(messages)
            .where(messages.c.id == row.id)
            .values(text="", quote=None, deleted_at=now)
        )
        # Its words where they were kept besides: the replies that quote it, and the
        # ledger's copies of the events that carried them (kept for no one to read).
        quoting = list(
            conn.execute(
                select(messages.c.id).where(
                    messages.c.conversation_id == row.conversation_id,
                    messages.c.quote["message_id"].as_string() == message_id,
                )
            ).scalars()
        )
        if quoting:
            conn.execute(update(messages).where(messages.c.id.in_(quoting)).values(quote=None))
        conn.execute(
            update(ingress).where(ingress.c.message_id.in_([row.id, *quoting])).values(payload="{}")
        )
        forgotten = 0
        if row.turn_id is not None:
            conn.execute(
                update(turns)
                .where(turns.c.id == row.turn_id, turns.c.status == "pending")
                .values(status="failed", error=DELETED_BEFORE_ANSWER, finished_at=now)
            )
            status = conn.execute(select(turns.c.status).where(turns.c.id == row.turn_id)).scalar()
            if status in ("done", "failed"):
                # What its journal kept of it (a finished turn is never read again).
                strip_steps(conn, [row.turn_id], "deleted")
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
        # The platform does not say who deleted it (its author, or a moderator).
        audit.append(
            conn, actor=f"{key.platform}:platform", action="message.delete",
            subject=str(row.id), conversation_id=row.conversation_id, turn_id=row.turn_id,
            detail={"memories_forgotten": forgotten}, now=now,
        )  # fmt: skip
    return len(found)


def edit_message(
    conn: Connection, key: ConversationKey, message_id: str, text: str
) -> EditOutcome | None:
    """The person's message, edited to ``text``: ``replaced`` when its turn has not started
    (it reads the new text); ``running`` when its turn runs now (nothing stored here: the
    edit comes in as a message of its own, for the busy mode); ``noted`` when it was
    answered (the history keeps the new text and says what it first said). None when it
    is not one of ours, or its text did not change."""
    found = _theirs(conn, key, message_id)
    if not found:
        return None
    row = found[0]
    before = str(row.text)
    if text == (before[: before.index(_NOTED)] if _NOTED in before else before):
        return None  # not an edit: a link preview filled in, a pin, a platform's retry
    status = None
    if row.turn_id is not None:
        # Locked: a turn that starts now waits for this edit, and then reads it.
        status = conn.execute(
            select(turns.c.status).where(turns.c.id == row.turn_id).with_for_update()
        ).scalar()
    if status in ("running", "waiting"):
        return "running"
    outcome: EditOutcome
    if status == "pending":
        stored, outcome = text, "replaced"
    else:
        if _NOTED in before:  # edited before: what it first said is noted already
            note = before[before.index(_NOTED) :]
        else:
            first = " ".join(before.split())
            shown = first if len(first) <= _SHOWN else first[: _SHOWN - 1] + "…"
            note = f'{_NOTED}"{shown}"]'
        stored, outcome = text + note, "noted"
    conn.execute(update(messages).where(messages.c.id == row.id).values(text=stored))
    return outcome


def _theirs(conn: Connection, key: ConversationKey, message_id: str) -> Sequence[Row[Any]]:
    """The person's messages (not deleted) with this platform id at ``key``."""
    query = (
        select(messages.c.id, messages.c.turn_id, messages.c.conversation_id,
               messages.c.author, messages.c.text)
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
    )  # fmt: skip
    if key.thread is not None:
        query = query.where(conversations.c.thread == key.thread)
    rows: Sequence[Row[Any]] = conn.execute(query).all()  # type: ignore[assignment]
    return rows

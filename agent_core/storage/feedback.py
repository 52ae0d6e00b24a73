"""Ratings of the agent's replies: the transactions behind ``Store``'s feedback methods
(``agent_core.feedback`` says what they mean), each a plain function over a connection.

Every change is audited in its own transaction with ids only (``feedback.rate``,
``feedback.ask``, ``feedback.comment``), never a comment's text. The audit's
``feedback.ask`` entries are also what keeps "what went wrong?" to once per person and
turn: a rating taken off and put back is a new row, but not a new question.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import JsonValue
from sqlalchemy import bindparam, delete, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from agent_core.events import ConversationKey, Platform, Rating
from agent_core.records import RatedMessage, RatingChange
from agent_core.storage import audit
from agent_core.storage.schema import audit_log, conversations, feedback, messages, turns

Json = dict[str, JsonValue]
# The agent's messages: its replies, and the notes a turn wrote (a stop, a budget).
_RATEABLE = ("assistant", "system")
_TARGET = (
    select(
        messages.c.id,
        messages.c.turn_id,
        messages.c.conversation_id,
        messages.c.platform_message_id,
        messages.c.created_at,
        conversations.c.platform,
        conversations.c.workspace,
        conversations.c.channel,
        conversations.c.thread,
    )
    .join(conversations, conversations.c.id == messages.c.conversation_id)
    .where(messages.c.role.in_(_RATEABLE), messages.c.turn_id.is_not(None))
)
_INSERT: dict[str, sqlite.Insert | postgresql.Insert] = {
    "sqlite": sqlite.insert(feedback),
    "postgresql": postgresql.insert(feedback),
}


def _target(row: Any) -> RatedMessage:
    platform: Platform = row.platform
    return RatedMessage(
        message_id=int(row.id),
        turn_id=int(row.turn_id),
        conversation_id=row.conversation_id,
        conversation=ConversationKey(
            platform=platform,
            workspace=row.workspace,
            channel=row.channel,
            thread=row.thread or None,
        ),
        platform_message_id=row.platform_message_id,
        sent_at=row.created_at,
    )


def rated_message(
    conn: Connection, platform: str, workspace: str, channel: str, platform_message_id: str
) -> RatedMessage | None:
    """Found through ``ix_messages_platform_message_id``. A Discord thread is a channel of
    its own there, and the thread of its conversation here: either column may hold it (on
    Discord only: a Telegram chat id may equal a forum topic's id elsewhere).
    A long reply's receipt is its first chunk's id, so a reaction on a later chunk finds
    nothing (and counts for nothing)."""
    query = _TARGET.where(
        messages.c.platform_message_id == platform_message_id,
        conversations.c.platform == platform,
        conversations.c.workspace == workspace,
        (conversations.c.channel == channel)
        | ((conversations.c.thread == channel) & (conversations.c.platform == "discord")),
    )
    row = conn.execute(query.order_by(messages.c.id).limit(1)).first()
    return _target(row) if row is not None else None


def message_to_rate(conn: Connection, message_id: int) -> RatedMessage | None:
    row = conn.execute(_TARGET.where(messages.c.id == message_id)).first()
    return _target(row) if row is not None else None


def rate(
    conn: Connection,
    target: RatedMessage,
    *,
    user: str,
    rating: Rating | None,
    only: Rating | None,
    now: datetime,
) -> RatingChange:
    mine = (feedback.c.turn_id == target.turn_id) & (feedback.c.user_id == user)
    row = conn.execute(
        select(feedback.c.id, feedback.c.rating, feedback.c.asked_at).where(mine)
    ).first()
    previous: Rating | None = row.rating if row is not None else None
    if rating is None:
        if row is None or (only is not None and row.rating != only):
            return RatingChange(
                feedback_id=row.id if row else None, rating=previous, previous=previous
            )
        conn.execute(delete(feedback).where(feedback.c.id == row.id))
        _audit(conn, "feedback.rate", target, user, {"feedback_id": int(row.id), "rating": None})
        return RatingChange(feedback_id=None, rating=None, previous=previous)
    if row is None:
        inserted = conn.execute(
            _INSERT[conn.dialect.name]
            .values(
                turn_id=target.turn_id,
                conversation_id=target.conversation_id,
                message_id=target.message_id,
                user_id=user,
                rating=rating,
                created_at=now,
                updated_at=now,
            )
            .on_conflict_do_nothing(index_elements=["turn_id", "user_id"])
            .returning(feedback.c.id)
        ).scalar()
        if inserted is None:  # the same person's other reaction got in first: it is theirs
            return rate(conn, target, user=user, rating=rating, only=only, now=now)
        feedback_id, asked_at = int(inserted), None
    else:
        feedback_id, asked_at = int(row.id), row.asked_at
        if row.rating == rating:
            return RatingChange(
                feedback_id=feedback_id, rating=rating, previous=previous, asked_at=asked_at
            )
        conn.execute(
            update(feedback)
            .where(feedback.c.id == feedback_id)
            .values(rating=rating, message_id=target.message_id, updated_at=now)
        )
    detail: Json = {"feedback_id": feedback_id, "message_id": target.message_id, "rating": rating}
    _audit(conn, "feedback.rate", target, user, detail)
    return RatingChange(
        feedback_id=feedback_id, rating=rating, previous=previous, asked_at=asked_at
    )


def _audit(conn: Connection, action: str, target: RatedMessage, user: str, detail: Json) -> None:
    audit.append(
        conn,
        actor=user,
        action=action,
        subject=user,
        conversation_id=target.conversation_id,
        turn_id=target.turn_id,
        detail=detail,
    )


def claim_question(conn: Connection, feedback_id: int, *, now: datetime) -> bool:
    row = conn.execute(
        select(feedback.c.turn_id, feedback.c.user_id, feedback.c.conversation_id).where(
            feedback.c.id == feedback_id, feedback.c.asked_at.is_(None)
        )
    ).first()
    if row is None:
        return False
    asked_before = conn.execute(
        select(audit_log.c.id)
        .where(
            audit_log.c.subject == row.user_id,
            audit_log.c.action == "feedback.ask",
            audit_log.c.turn_id == row.turn_id,
        )
        .limit(1)
    ).first()
    if asked_before is not None:
        return False
    claimed = conn.execute(
        update(feedback)
        .where(feedback.c.id == feedback_id, feedback.c.asked_at.is_(None))
        .values(asked_at=now)
    ).rowcount
    if not claimed:
        return False
    # Only the newest question waits: the person's next message answers this one, and
    # an older one left open would take the message after (it ends with no comment).
    conn.execute(
        update(feedback)
        .where(
            feedback.c.conversation_id == row.conversation_id,
            feedback.c.user_id == row.user_id,
            feedback.c.id != feedback_id,
            feedback.c.asked_at.is_not(None),
            feedback.c.comment.is_(None),
        )
        .values(comment="", updated_at=now)
    )
    audit.append(
        conn,
        actor=row.user_id,
        action="feedback.ask",
        subject=row.user_id,
        conversation_id=row.conversation_id,
        turn_id=row.turn_id,
        detail={"feedback_id": feedback_id},
        now=now,
    )
    return True


def question_failed(conn: Connection, feedback_id: int) -> None:
    conn.execute(
        update(feedback)
        .where(feedback.c.id == feedback_id, feedback.c.comment.is_(None))
        .values(asked_at=None)
    )


# Asked for every message the ledger takes: built once (building it costs more than
# running it).
_AWAITING = (
    select(feedback.c.id)
    .where(
        feedback.c.conversation_id == bindparam("b_conversation"),
        feedback.c.user_id == bindparam("b_user"),
        feedback.c.rating == "down",
        feedback.c.comment.is_(None),
        feedback.c.asked_at >= bindparam("b_since"),
    )
    .order_by(feedback.c.asked_at.desc())
    .limit(1)
)


def awaiting(conn: Connection, conversation_id: str, user: str, *, since: datetime) -> int | None:
    """The rating whose "what went wrong?" ``user`` has yet to answer here (asked since
    ``since``), if any: their message is its answer (``ledger.accept``)."""
    found = conn.execute(
        _AWAITING, {"b_conversation": conversation_id, "b_user": user, "b_since": since}
    ).scalar()
    return int(found) if found is not None else None


def answer(conn: Connection, feedback_id: int, *, comment: str, now: datetime) -> None:
    """Keep the answer as the rating's comment ('' for a skip); the wait ends."""
    row = conn.execute(
        update(feedback)
        .where(feedback.c.id == feedback_id, feedback.c.comment.is_(None))
        .values(comment=comment, updated_at=now)
        .returning(feedback.c.user_id, feedback.c.conversation_id, feedback.c.turn_id)
    ).first()
    if row is not None:
        audit.append(
            conn,
            actor=row.user_id,
            action="feedback.comment",
            subject=row.user_id,
            conversation_id=row.conversation_id,
            turn_id=row.turn_id,
            detail={"feedback_id": feedback_id, "skipped": comment == ""},
            now=now,
        )


def counts(conn: Connection, conversation_id: str) -> dict[str, int]:
    """👍 and 👎 given to the conversation's replies so far."""
    rows = conn.execute(
        select(feedback.c.rating, func.count())
        .where(feedback.c.conversation_id == conversation_id)
        .group_by(feedback.c.rating)
    ).all()
    found = {str(rating): int(n) for rating, n in rows}
    return {"up": found.get("up", 0), "down": found.get("down", 0)}


def totals_since(conn: Connection, *, since: datetime) -> dict[str, int]:
    """👍 and 👎 as they stand, of ratings given or changed since ``since`` (the console's
    usage period)."""
    rows = conn.execute(
        select(feedback.c.rating, func.count())
        .where(feedback.c.updated_at >= since)
        .group_by(feedback.c.rating)
    ).all()
    found = {str(rating): int(n) for rating, n in rows}
    return {"up": found.get("up", 0), "down": found.get("down", 0)}


def ratings_of(conn: Connection, message_ids: Sequence[int]) -> dict[int, dict[str, str]]:
    """Who rated which of these messages how: {message id: {user: rating}}."""
    if not message_ids:
        return {}
    found: dict[int, dict[str, str]] = {}
    for message_id, user, rating in conn.execute(
        select(feedback.c.message_id, feedback.c.user_id, feedback.c.rating).where(
            feedback.c.message_id.in_(list(message_ids))
        )
    ).all():
        found.setdefault(int(message_id), {})[user] = rating
    return found


def item(row: Any) -> Json:
    """A rating as the console shows it."""
    return {
        "id": int(row.id),
        "turn_id": int(row.turn_id),
        "conversation_id": row.conversation_id,
        "message_id": int(row.message_id) if row.message_id is not None else None,
        "user": row.user_id,
        "rating": row.rating,
        "comment": row.comment,
        "asked_at": row.asked_at.isoformat() if row.asked_at else None,
        "created_at": row.created_at.isoformat(),
        "updated_at": row.updated_at.isoformat(),
    }


def for_turn(conn: Connection, turn_id: int) -> list[JsonValue]:
    """A turn's ratings, oldest first (its timeline in the console)."""
    rows = conn.execute(
        select(feedback).where(feedback.c.turn_id == turn_id).order_by(feedback.c.id)
    )
    return [item(row) for row in rows]


def page(conn: Connection, *, rating: str | None, before: int | None, limit: int) -> Json:
    """Rated turns, the newest rating first (``before``: a rating id, for the next page),
    with where they were and who asked."""
    query = (
        select(
            feedback,
            conversations.c.platform,
            conversations.c.channel,
            turns.c.user_id.label("asker"),
        )
        .join(conversations, conversations.c.id == feedback.c.conversation_id)
        .join(turns, turns.c.id == feedback.c.turn_id)
    )
    if rating is not None:
        query = query.where(feedback.c.rating == rating)
    if before is not None:
        query = query.where(feedback.c.id < before)
    rows = conn.execute(query.order_by(feedback.c.id.desc()).limit(limit)).all()
    items: list[JsonValue] = [
        {**item(row), "platform": row.platform, "channel": row.channel, "asked_by": row.asker}
        for row in rows
    ]
    return {"items": items, "next": int(rows[-1].id) if len(rows) == limit else None}

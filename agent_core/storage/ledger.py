"""Conversations, the ingress ledger, leases, messages and history: the transactions behind
``Store``'s methods for them (each a plain function over a connection).

Statements are built once, with bind parameters, so a transaction pays only for compiled-
cache lookups and the database's own work. Bind names start with ``b_`` because an UPDATE
may not bind a name that is also one of its columns.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, cast, get_args

from pydantic import JsonValue
from sqlalchemy import bindparam, exists, func, insert, or_, select, true, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Row

from agent_core.events import ConversationKey, InboundMessage, utcnow
from agent_core.feedback import ANSWER_WINDOW, comment_of
from agent_core.quoting import quote_json, with_quote
from agent_core.records import (
    Accepted,
    ApprovalRecord,
    BusyMode,
    ConversationRecord,
    HistoryLine,
    MessageRecord,
    TurnRecord,
    TurnStatus,
)
from agent_core.storage import approvals as approval_sql
from agent_core.storage import attachments as attachment_rows
from agent_core.storage import feedback as feedback_rows
from agent_core.storage import journal
from agent_core.storage import questions as question_rows
from agent_core.storage.schema import (
    conversations,
    dead_letters,
    ingress,
    messages,
    turns,
)

#
# Statements are built once, with bind parameters, so a transaction pays only for compiled-
# cache lookups and the database's own work. Bind names start with ``b_`` because an UPDATE
# may not bind a name that is also one of its columns.


def _upsert_conversation_statement(dialect: Any) -> Any:
    statement = dialect.insert(conversations).values(
        id=bindparam("b_id"),
        platform=bindparam("b_platform"),
        workspace=bindparam("b_workspace"),
        channel=bindparam("b_channel"),
        thread=bindparam("b_thread"),
        created_at=bindparam("b_now"),
        updated_at=bindparam("b_now"),
    )
    return statement.on_conflict_do_update(
        index_elements=["platform", "workspace", "channel", "thread"],
        set_={"updated_at": statement.excluded.updated_at},
    ).returning(
        conversations.c.id,
        conversations.c.busy_mode,
        conversations.c.lease_expires_at,
        conversations.c.profile,
    )


_UPSERT_CONVERSATION = {
    "sqlite": _upsert_conversation_statement(sqlite),
    "postgresql": _upsert_conversation_statement(postgresql),
}
_INSERT_TURN = insert(turns).returning(turns.c.id)
_INSERT_INGRESS = insert(ingress)
_LEDGERED = select(ingress.c.conversation_id, ingress.c.message_id, ingress.c.turn_id).where(
    ingress.c.platform == bindparam("b_platform"), ingress.c.event_id == bindparam("b_event_id")
)
_CLAIM = (
    update(conversations)
    .where(
        conversations.c.id == bindparam("b_id"),
        or_(
            conversations.c.lease_owner.is_(None),
            conversations.c.lease_owner == bindparam("b_owner"),
            conversations.c.lease_expires_at < bindparam("b_now"),
        ),
    )
    .values(lease_owner=bindparam("b_owner"), lease_expires_at=bindparam("b_until"))
)
_RENEW = (
    update(conversations)
    .where(
        conversations.c.id == bindparam("b_id"),
        conversations.c.lease_owner == bindparam("b_owner"),
    )
    .values(lease_expires_at=bindparam("b_until"))
)
_RELEASE = (
    update(conversations)
    .where(
        conversations.c.id == bindparam("b_id"),
        conversations.c.lease_owner == bindparam("b_owner"),
    )
    .values(lease_owner=None, lease_expires_at=None)
)
# The same, only when the conversation has no open turn left for this lane.
_RELEASE_IF_IDLE = _RELEASE.where(
    ~exists().where(
        turns.c.conversation_id == bindparam("b_id"),
        turns.c.status.in_(journal.OPEN),
        turns.c.lane == "inline",
    )
)
_HISTORY_FROM = (
    select(func.coalesce(conversations.c.history_from, 0))
    .where(conversations.c.id == bindparam("b_id"))
    .scalar_subquery()
)
_SUMMARY_TURN = (
    select(func.coalesce(conversations.c.summary_turn, 0))
    .where(conversations.c.id == bindparam("b_id"))
    .scalar_subquery()
)
_HISTORY = (
    select(messages)
    .where(
        messages.c.conversation_id == bindparam("b_id"),
        messages.c.turn_id < bindparam("b_turn"),
        messages.c.turn_id > _SUMMARY_TURN,
        messages.c.role.in_(("user", "assistant")),
        messages.c.id > _HISTORY_FROM,
        messages.c.deleted_at.is_(None),
    )
    .order_by(messages.c.turn_id.desc(), messages.c.id.desc())
    .limit(bindparam("b_limit"))
)
# What a prompt reads of the past: three columns, not the whole rows (up to hundreds).
_PAST = _HISTORY.with_only_columns(
    messages.c.role, messages.c.text, messages.c.turn_id, messages.c.quote
)
_MESSAGES_AFTER = (
    select(messages)
    .where(messages.c.conversation_id == bindparam("b_id"), messages.c.id > bindparam("b_after"))
    .order_by(messages.c.id)
    .limit(bindparam("b_limit"))
)


def accept(conn: Connection, event: InboundMessage, *, payload: str, open_turn: bool) -> Accepted:
    # No look-up first: duplicates are rare, and the ledger's unique key rejects them
    # (the caller then reads what the first delivery created).
    now = utcnow()
    conversation = conn.execute(
        _UPSERT_CONVERSATION[conn.dialect.name],
        {
            "b_id": uuid.uuid4().hex,
            "b_platform": event.platform,
            "b_workspace": event.workspace,
            "b_channel": event.channel,
            "b_thread": event.thread or "",
            "b_now": now,
        },
    ).one()
    conversation_id = str(conversation.id)
    # The person was asked "what went wrong?" here: this message is the answer, kept with
    # their rating and never a turn (the model does not see it).
    answered = (
        feedback_rows.awaiting(conn, conversation_id, event.user, since=now - ANSWER_WINDOW)
        if open_turn
        else None
    )
    if answered is not None:
        open_turn = False
        feedback_rows.answer(conn, answered, comment=comment_of(event.text), now=now)
    # They pressed "Other" on a question here: this message is the answer, and joins the
    # asking turn's history.
    question = (
        question_rows.typed_answer(conn, conversation_id, event.user, event.text)
        if open_turn
        else None
    )
    open_turn = open_turn and question is None
    turn_id = (
        int(
            conn.execute(
                _INSERT_TURN,
                {
                    "conversation_id": conversation_id,
                    "user_id": event.user,
                    "reply_to": event.reply_to,
                    "status": "pending",
                    "attempts": 0,
                    "created_at": now,
                },
            ).scalar_one()
        )
        if open_turn
        else None
    )
    message_id = int(
        conn.execute(
            journal.INSERT_MESSAGE,
            {
                "conversation_id": conversation_id,
                "role": "user",
                "text": event.text,
                "author": event.user,
                "turn_id": turn_id or (question.turn_id if question else None),
                "platform_message_id": event.reply_to,
                "quote": quote_json(event.quote),
                "created_at": now,
            },
        ).scalar_one()
    )
    attachment_rows.add(
        conn,
        event.attachments,
        message_id=message_id,
        conversation_id=conversation_id,
        turn_id=turn_id,
    )
    conn.execute(
        _INSERT_INGRESS,
        {
            "platform": event.platform,
            "event_id": event.platform_event_id,
            "kind": event.kind,
            "conversation_id": conversation_id,
            "message_id": message_id,
            "turn_id": turn_id,
            "payload": payload,
            "received_at": event.received_at,
        },
    )
    return Accepted(
        conversation_id=conversation_id,
        message_id=message_id,
        turn_id=turn_id or 0,
        duplicate=False,
        busy_mode=conversation.busy_mode,
        behind=conversation.lease_expires_at is not None and conversation.lease_expires_at > now,
        answered=answered,
        question=question,
        pinned_profile=conversation.profile,
    )


def add_note(
    conn: Connection,
    conversation_id: str,
    *,
    text: str,
    approval_id: str | None,
    payload: JsonValue = None,
    key: str | None = None,
) -> int:
    if key is not None:
        found = conn.execute(
            select(messages.c.id).where(messages.c.delivery_key == key)
        ).scalar_one_or_none()
        if found is not None:
            return int(found)
    values = {
        "delivery_key": key,
        "conversation_id": conversation_id,
        "role": "system",
        "text": text,
        "approval_id": approval_id,
        "payload": payload,
        "created_at": utcnow(),
    }
    return int(conn.execute(journal.INSERT_MESSAGE, values).scalar_one())


def rewrite_note(conn: Connection, message_id: int, *, text: str, payload: JsonValue) -> None:
    conn.execute(
        update(messages)
        .where(messages.c.id == message_id, messages.c.role == "system")
        .values(text=text, payload=payload)
    )


def start_fresh(conn: Connection, conversation_id: str, *, note: str) -> int:
    note_id = add_note(conn, conversation_id, text=note, approval_id=None)
    conn.execute(
        update(conversations)
        .where(conversations.c.id == conversation_id)
        .values(history_from=note_id, summary=None, summary_turn=None)
    )
    return note_id


def ledgered(conn: Connection, platform: str, event_id: str) -> Accepted | None:
    row = conn.execute(_LEDGERED, {"b_platform": platform, "b_event_id": event_id}).first()
    if row is None:
        return None
    return Accepted(
        conversation_id=row.conversation_id,
        message_id=row.message_id,
        turn_id=row.turn_id or 0,
        duplicate=True,
    )


def ledgered_among(conn: Connection, platform: str, event_ids: list[str]) -> set[str]:
    query = select(ingress.c.event_id).where(
        ingress.c.platform == platform, ingress.c.event_id.in_(event_ids)
    )
    return set(conn.execute(query).scalars())


def claim(conn: Connection, conversation_id: str, *, owner: str, ttl: float) -> bool:
    now = utcnow()
    params = {
        "b_id": conversation_id,
        "b_owner": owner,
        "b_now": now,
        "b_until": now + timedelta(seconds=ttl),
    }
    return conn.execute(_CLAIM, params).rowcount == 1


def renew(conn: Connection, conversation_id: str, *, owner: str, ttl: float) -> bool:
    params = {
        "b_id": conversation_id,
        "b_owner": owner,
        "b_until": utcnow() + timedelta(seconds=ttl),
    }
    return conn.execute(_RENEW, params).rowcount == 1


def claim_and_begin(
    conn: Connection, conversation_id: str, *, owner: str, ttl: float
) -> tuple[bool, TurnRecord | None]:
    if not claim(conn, conversation_id, owner=owner, ttl=ttl):
        return False, None
    # A claim follows a new message, so there is nearly always a turn to start.
    turn = journal.begin_next(conn, conversation_id)
    if turn is None:
        release(conn, conversation_id, owner=owner)
    return True, turn


def next_or_release(conn: Connection, conversation_id: str, *, owner: str) -> TurnRecord | None:
    """After a turn: most often it was the conversation's last open one, so give the lease
    up in one statement that checks there is none left; only when there is one (or the
    lease is no longer ours, and the release changed nothing) look for it."""
    if conn.execute(_RELEASE_IF_IDLE, {"b_id": conversation_id, "b_owner": owner}).rowcount:
        return None
    turn = journal.begin_next(conn, conversation_id)
    if turn is None:
        release(conn, conversation_id, owner=owner)
    return turn


def reply_sent_and_next(
    conn: Connection,
    turn_id: int,
    seq: int,
    *,
    receipt: str,
    turn_status: TurnStatus,
    error: str | None,
    conversation_id: str,
    owner: str,
) -> TurnRecord | None:
    journal.reply_sent(conn, turn_id, seq, receipt=receipt, turn_status=turn_status, error=error)
    return next_or_release(conn, conversation_id, owner=owner)


def release(conn: Connection, conversation_id: str, *, owner: str) -> None:
    conn.execute(_RELEASE, {"b_id": conversation_id, "b_owner": owner})


def needing_work(conn: Connection, *, limit: int) -> list[str]:
    now = utcnow()
    query = (
        select(turns.c.conversation_id)
        .join(conversations, conversations.c.id == turns.c.conversation_id)
        .where(
            turns.c.status.in_(journal.OPEN),
            turns.c.lane == "inline",
            or_(conversations.c.lease_owner.is_(None), conversations.c.lease_expires_at < now),
        )
        .group_by(turns.c.conversation_id)
        .order_by(func.min(turns.c.id))
        .limit(limit)
    )
    return [str(cid) for cid in conn.execute(query).scalars()]


def history(
    conn: Connection, conversation_id: str, *, before_turn_id: int, limit: int
) -> list[MessageRecord]:
    params = {"b_id": conversation_id, "b_turn": before_turn_id, "b_limit": limit}
    return [_message(row) for row in reversed(conn.execute(_HISTORY, params).all())]


def model_call_started(
    conn: Connection, turn: TurnRecord, seq: int, *, input: JsonValue, history_limit: int
) -> tuple[str | None, list[HistoryLine]]:
    """Journal a model call as started and read what it will see of the past (the running
    summary, and the history after it): the first model call of a turn needs both, and one
    transaction is one trip to the database."""
    journal.begin_step(conn, turn.id, seq, kind="model_call", input=input)
    summary = conn.execute(
        select(conversations.c.summary).where(conversations.c.id == turn.conversation_id)
    ).scalar()
    params = {"b_id": turn.conversation_id, "b_turn": turn.id, "b_limit": history_limit}
    rows = conn.execute(_PAST, params).all()
    return summary, [
        HistoryLine(row[0], with_quote(row[1], row[3]) if row[0] == "user" else row[1], row[2])
        for row in reversed(rows)
    ]


def save_summary(conn: Connection, conversation_id: str, *, summary: str, upto_turn: int) -> bool:
    """Store a newer running summary (one covering fewer turns is stale and dropped)."""
    query = (
        update(conversations)
        .where(
            conversations.c.id == conversation_id,
            or_(
                conversations.c.summary_turn.is_(None),
                conversations.c.summary_turn < upto_turn,
            ),
        )
        .values(summary=summary, summary_turn=upto_turn)
    )
    return conn.execute(query).rowcount == 1


def messages_after(
    conn: Connection, conversation_id: str, *, after_id: int, limit: int
) -> list[MessageRecord]:
    params = {"b_id": conversation_id, "b_after": after_id, "b_limit": limit}
    rows = conn.execute(_MESSAGES_AFTER, params).all()
    found = approval_sql.load_many(conn, [r.approval_id for r in rows if r.approval_id])
    files = attachment_rows.names(conn, [r.id for r in rows if r.role == "user"])
    return [
        replace(_message(row, approval=found.get(row.approval_id)), files=files.get(row.id, ()))
        for row in rows
    ]


_SET_BUSY_MODE = (
    update(conversations)
    .where(conversations.c.id == bindparam("b_id"))
    .values(busy_mode=bindparam("b_mode"))
)
_BUSY_MODE = select(conversations.c.busy_mode).where(conversations.c.id == bindparam("b_id"))


_LAST_MESSAGE_AT = select(func.max(messages.c.created_at)).where(
    messages.c.conversation_id == bindparam("b_id"), messages.c.role == "user"
)


def last_message_at(conn: Connection, conversation_id: str) -> datetime | None:
    found = conn.execute(_LAST_MESSAGE_AT, {"b_id": conversation_id}).scalar()
    return found if isinstance(found, datetime) else None


def set_busy_mode(conn: Connection, conversation_id: str, mode: BusyMode | None) -> None:
    conn.execute(_SET_BUSY_MODE, {"b_id": conversation_id, "b_mode": mode})


def busy_mode(conn: Connection, conversation_id: str) -> BusyMode | None:
    found = conn.execute(_BUSY_MODE, {"b_id": conversation_id}).scalar()
    return cast(BusyMode, found) if found in get_args(BusyMode) else None


def pin(conn: Connection, conversation_id: str, *, kind: str, value: str | None) -> None:
    """Set (or, with None, clear) what an admin chose here: ``kind`` is profile or model."""
    column = {"profile": conversations.c.profile, "model": conversations.c.model}[kind]
    conn.execute(
        update(conversations).where(conversations.c.id == conversation_id).values({column: value})
    )


def pins(conn: Connection, conversation_id: str) -> tuple[str | None, str | None]:
    """The profile and the model an admin chose here (None: none)."""
    row = conn.execute(
        select(conversations.c.profile, conversations.c.model).where(
            conversations.c.id == conversation_id
        )
    ).first()
    return (row.profile, row.model) if row is not None else (None, None)


def conversation_id_for(conn: Connection, key: ConversationKey) -> str | None:
    query = select(conversations.c.id).where(
        conversations.c.platform == key.platform,
        conversations.c.workspace == key.workspace,
        conversations.c.channel == key.channel,
        conversations.c.thread == (key.thread or ""),
    )
    found = conn.execute(query).scalar()
    return None if found is None else str(found)


def find_conversation(conn: Connection, platform: str, channel: str) -> str | None:
    query = (
        select(conversations.c.id)
        .where(conversations.c.platform == platform, conversations.c.channel == channel)
        .order_by(conversations.c.thread, conversations.c.created_at)
        .limit(1)
    )
    found = conn.execute(query).scalar()
    return None if found is None else str(found)


def message_by_id(conn: Connection, message_id: int) -> MessageRecord | None:
    row = conn.execute(select(messages).where(messages.c.id == message_id)).first()
    return None if row is None else _message(row)


def conversation_by_id(conn: Connection, conversation_id: str) -> ConversationRecord | None:
    row = conn.execute(select(conversations).where(conversations.c.id == conversation_id)).first()
    return None if row is None else _conversation(row)


def list_conversations(
    conn: Connection, *, platform: str, limit: int, since: datetime | None = None
) -> list[ConversationRecord]:
    query = (
        select(conversations)
        .where(
            conversations.c.platform == platform,
            true() if since is None else conversations.c.updated_at >= since,
        )
        .order_by(conversations.c.updated_at.desc(), conversations.c.id)
        .limit(limit)
    )
    return [_conversation(row) for row in conn.execute(query).all()]


def open_turn_count(conn: Connection, conversation_id: str | None) -> int:
    query = select(func.count()).select_from(turns).where(turns.c.status.in_(journal.OPEN))
    if conversation_id is not None:
        query = query.where(turns.c.conversation_id == conversation_id)
    return int(conn.execute(query).scalar_one())


# -- rows to records -----------------------------------------------------------------------


def _message(row: Row[Any], *, approval: ApprovalRecord | None = None) -> MessageRecord:
    return MessageRecord(
        id=int(row.id),
        conversation_id=row.conversation_id,
        role=row.role,
        text=row.text,
        author=row.author,
        turn_id=None if row.turn_id is None else int(row.turn_id),
        platform_message_id=row.platform_message_id,
        created_at=row.created_at,
        approval=approval,
        payload=row.payload,
    )


def _conversation(row: Row[Any]) -> ConversationRecord:
    return ConversationRecord(
        id=row.id,
        key=journal.conversation_key(row),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def dead_letter(
    conn: Connection, *, platform: str, event_id: str, raw: JsonValue, error: str
) -> None:
    """Keep an update that cannot be processed: JSON with every non-ASCII character (and
    NUL) escaped, so any database stores it."""
    conn.execute(
        insert(dead_letters),
        {
            "platform": platform,
            "event_id": event_id[:128],
            "raw": json.dumps(raw, ensure_ascii=True, default=str),
            "error": json.dumps(error, ensure_ascii=True)[1:-1],
            "created_at": utcnow(),
        },
    )

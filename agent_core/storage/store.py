"""The store: the ingress ledger, conversations and their leases, messages, turns, steps.

Each public method is one transaction, written as a plain function over a connection and
run by :class:`~agent_core.storage.database.Database`. Writes that must happen together
share one: the ledger row, the user's message and the turn; a reply's journal step and
its message; the receipt and the end of the turn.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from pydantic import JsonValue
from sqlalchemy import func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Row
from sqlalchemy.exc import IntegrityError

from agent_core.events import ConversationKey, InboundMessage, event_to_json, utcnow
from agent_core.records import (
    Accepted,
    ConversationRecord,
    MessageRecord,
    Role,
    StepKind,
    StepRecord,
    StepStatus,
    TurnRecord,
    TurnStatus,
)
from agent_core.storage.database import Database
from agent_core.storage.schema import conversations, ingress, messages, turn_steps, turns

_OPEN: tuple[TurnStatus, ...] = ("pending", "running")


class Store:
    """All reads and writes chatgate makes."""

    def __init__(self, database: Database) -> None:
        self.database = database

    # -- ingress ---------------------------------------------------------------------------

    async def accept_inbound(self, event: InboundMessage) -> Accepted:
        """Ledger the event, store the user's message and open a turn, all or nothing.

        A second delivery of the same (platform, platform_event_id) changes nothing and
        returns what the first one created, with ``duplicate=True``.
        """
        try:
            return await self.database.write(_accept, event, payload=event_to_json(event))
        except IntegrityError:
            # Another process ledgered the same event between our check and our insert.
            existing = await self.database.read(_ledgered, event.platform, event.platform_event_id)
            if existing is None:
                raise
            return existing

    # -- leases ----------------------------------------------------------------------------

    async def claim_lease(self, conversation_id: str, *, owner: str, ttl: float) -> bool:
        """Take (or renew) the conversation's lease unless another live owner holds it."""
        return await self.database.write(_claim, conversation_id, owner=owner, ttl=ttl)

    async def release_lease(self, conversation_id: str, *, owner: str) -> None:
        """Give the lease up, if this owner still holds it."""
        await self.database.write(_release, conversation_id, owner=owner)

    async def conversations_needing_work(self, *, limit: int = 500) -> list[str]:
        """Conversations with an open turn and no live lease: what a sweeper should run."""
        return await self.database.read(_needing_work, limit=limit)

    # -- turns and their journal -----------------------------------------------------------

    async def begin_next_turn(self, conversation_id: str, *, owner: str) -> TurnRecord | None:
        """Start the conversation's oldest unfinished turn (counting the attempt) and return
        it with its journal; with none left, give the lease up in the same transaction."""
        return await self.database.write(_begin_next, conversation_id, owner=owner)

    async def start_turn(self, turn_id: int) -> TurnRecord:
        """Mark one turn running, count the attempt, and return it with its journal."""
        return await self.database.write(_start, turn_id)

    async def load_turn(self, turn_id: int) -> TurnRecord:
        """A turn, the message that triggered it, and every journaled step in order."""
        return await self.database.read(_load_turn, turn_id)

    async def finish_turn(self, turn_id: int, *, status: TurnStatus, error: str | None) -> None:
        """Close a turn for good."""
        await self.database.write(_finish_turn, turn_id, status=status, error=error)

    async def begin_step(self, turn_id: int, seq: int, *, kind: StepKind, input: JsonValue) -> None:
        """Journal that a step is about to happen (a redo keeps the first row)."""
        await self.database.write(_begin_step, turn_id, seq, kind=kind, input=input)

    async def finish_step(
        self, turn_id: int, seq: int, *, kind: StepKind, status: StepStatus, output: JsonValue
    ) -> None:
        """Journal a step's outcome (creating the row if its start was not journaled)."""
        await self.database.write(
            _finish_step, turn_id, seq, kind=kind, status=status, output=output
        )

    async def record_reply_intent(
        self, turn: TurnRecord, seq: int, *, role: Role, text: str, delivery_key: str
    ) -> int:
        """Journal the reply step and add the reply to the history in one transaction."""
        return await self.database.write(
            _reply_intent, turn, seq, role=role, text=text, delivery_key=delivery_key
        )

    async def record_reply_sent(
        self,
        turn_id: int,
        seq: int,
        *,
        receipt: str,
        turn_status: TurnStatus | None = None,
        error: str | None = None,
    ) -> None:
        """Journal the platform's receipt; with ``turn_status``, also close the turn."""
        await self.database.write(
            _reply_sent, turn_id, seq, receipt=receipt, turn_status=turn_status, error=error
        )

    # -- conversations and history ---------------------------------------------------------

    async def history(
        self, conversation_id: str, *, before_turn_id: int, limit: int
    ) -> list[MessageRecord]:
        """The user and assistant messages of earlier turns, oldest first (at most ``limit``).

        Ordered by turn, then message: a reply belongs after the question it answered even
        when later questions were stored before it.
        """
        return await self.database.read(
            _history, conversation_id, before_turn_id=before_turn_id, limit=limit
        )

    async def messages_after(
        self, conversation_id: str, *, after_id: int = 0, limit: int = 500
    ) -> list[MessageRecord]:
        """A conversation's messages with ids above ``after_id``, in order."""
        return await self.database.read(
            _messages_after, conversation_id, after_id=after_id, limit=limit
        )

    async def conversation(self, conversation_id: str) -> ConversationRecord | None:
        """One conversation by id, or None."""
        return await self.database.read(_conversation_by_id, conversation_id)

    async def list_conversations(
        self, *, platform: str, limit: int = 200
    ) -> list[ConversationRecord]:
        """A platform's conversations, most recently active first."""
        return await self.database.read(_list_conversations, platform=platform, limit=limit)

    async def open_turn_count(self, conversation_id: str | None = None) -> int:
        """How many turns have not finished (in one conversation, or anywhere)."""
        return await self.database.read(_open_turn_count, conversation_id)


# -- the transactions ----------------------------------------------------------------------


def _accept(conn: Connection, event: InboundMessage, *, payload: str) -> Accepted:
    existing = _ledgered(conn, event.platform, event.platform_event_id)
    if existing is not None:
        return existing
    now = utcnow()
    conversation_id = _upsert_conversation(conn, event.conversation, now)
    message_id = _insert(
        conn,
        messages,
        conversation_id=conversation_id,
        role="user",
        text=event.text,
        author=event.user,
        platform_message_id=event.reply_to,
        created_at=now,
    )
    turn_id = _insert(
        conn,
        turns,
        conversation_id=conversation_id,
        trigger_message_id=message_id,
        user_id=event.user,
        reply_to=event.reply_to,
        status="pending",
        attempts=0,
        created_at=now,
    )
    conn.execute(update(messages).where(messages.c.id == message_id).values(turn_id=turn_id))
    conn.execute(
        ingress.insert().values(
            platform=event.platform,
            event_id=event.platform_event_id,
            kind=event.kind,
            conversation_id=conversation_id,
            message_id=message_id,
            turn_id=turn_id,
            payload=payload,
            received_at=event.received_at,
        )
    )
    return Accepted(
        conversation_id=conversation_id, message_id=message_id, turn_id=turn_id, duplicate=False
    )


def _ledgered(conn: Connection, platform: str, event_id: str) -> Accepted | None:
    query = select(ingress.c.conversation_id, ingress.c.message_id, ingress.c.turn_id).where(
        ingress.c.platform == platform, ingress.c.event_id == event_id
    )
    row = conn.execute(query).first()
    if row is None:
        return None
    return Accepted(
        conversation_id=row.conversation_id,
        message_id=row.message_id,
        turn_id=row.turn_id,
        duplicate=True,
    )


def _upsert_conversation(conn: Connection, key: ConversationKey, now: datetime) -> str:
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    statement = dialect.insert(conversations).values(
        id=uuid.uuid4().hex,
        platform=key.platform,
        workspace=key.workspace,
        channel=key.channel,
        thread=key.thread or "",
        created_at=now,
        updated_at=now,
    )
    statement = statement.on_conflict_do_update(
        index_elements=["platform", "workspace", "channel", "thread"],
        set_={"updated_at": statement.excluded.updated_at},
    ).returning(conversations.c.id)
    return str(conn.execute(statement).scalar_one())


def _insert(conn: Connection, table: Any, **values: Any) -> int:
    return int(conn.execute(table.insert().values(**values).returning(table.c.id)).scalar_one())


def _claim(conn: Connection, conversation_id: str, *, owner: str, ttl: float) -> bool:
    now = utcnow()
    statement = (
        update(conversations)
        .where(
            conversations.c.id == conversation_id,
            or_(
                conversations.c.lease_owner.is_(None),
                conversations.c.lease_owner == owner,
                conversations.c.lease_expires_at < now,
            ),
        )
        .values(lease_owner=owner, lease_expires_at=now + timedelta(seconds=ttl))
    )
    return conn.execute(statement).rowcount == 1


def _release(conn: Connection, conversation_id: str, *, owner: str) -> None:
    conn.execute(
        update(conversations)
        .where(conversations.c.id == conversation_id, conversations.c.lease_owner == owner)
        .values(lease_owner=None, lease_expires_at=None)
    )


def _needing_work(conn: Connection, *, limit: int) -> list[str]:
    now = utcnow()
    query = (
        select(turns.c.conversation_id)
        .join(conversations, conversations.c.id == turns.c.conversation_id)
        .where(
            turns.c.status.in_(_OPEN),
            or_(conversations.c.lease_owner.is_(None), conversations.c.lease_expires_at < now),
        )
        .group_by(turns.c.conversation_id)
        .order_by(func.min(turns.c.id))
        .limit(limit)
    )
    return [str(cid) for cid in conn.execute(query).scalars()]


def _begin_next(conn: Connection, conversation_id: str, *, owner: str) -> TurnRecord | None:
    query = (
        select(turns.c.id)
        .where(turns.c.conversation_id == conversation_id, turns.c.status.in_(_OPEN))
        .order_by(turns.c.id)
        .limit(1)
    )
    turn_id = conn.execute(query).scalar()
    if turn_id is None:
        _release(conn, conversation_id, owner=owner)
        return None
    return _start(conn, int(turn_id))


def _start(conn: Connection, turn_id: int) -> TurnRecord:
    turn = _load_turn(conn, turn_id)
    conn.execute(
        update(turns)
        .where(turns.c.id == turn_id)
        .values(
            status="running",
            attempts=turns.c.attempts + 1,
            started_at=func.coalesce(turns.c.started_at, utcnow()),
        )
    )
    return turn


def _load_turn(conn: Connection, turn_id: int) -> TurnRecord:
    query = (
        select(
            turns,
            messages.c.text.label("trigger_text"),
            conversations.c.platform,
            conversations.c.workspace,
            conversations.c.channel,
            conversations.c.thread,
        )
        .join(messages, messages.c.id == turns.c.trigger_message_id)
        .join(conversations, conversations.c.id == turns.c.conversation_id)
        .where(turns.c.id == turn_id)
    )
    row = conn.execute(query).one()
    steps = conn.execute(
        select(turn_steps).where(turn_steps.c.turn_id == turn_id).order_by(turn_steps.c.seq)
    ).all()
    return TurnRecord(
        id=int(row.id),
        conversation_id=row.conversation_id,
        conversation=_key(row),
        status=row.status,
        attempts=int(row.attempts),
        user=row.user_id,
        trigger_message_id=int(row.trigger_message_id),
        trigger_text=row.trigger_text,
        reply_to=row.reply_to,
        created_at=row.created_at,
        steps=tuple(_step(step) for step in steps),
    )


def _finish_turn(conn: Connection, turn_id: int, *, status: TurnStatus, error: str | None) -> None:
    conn.execute(
        update(turns)
        .where(turns.c.id == turn_id)
        .values(status=status, error=error, finished_at=utcnow())
    )


def _step_exists(conn: Connection, turn_id: int, seq: int) -> bool:
    query = select(turn_steps.c.id).where(turn_steps.c.turn_id == turn_id, turn_steps.c.seq == seq)
    return conn.execute(query).first() is not None


def _begin_step(
    conn: Connection, turn_id: int, seq: int, *, kind: StepKind, input: JsonValue
) -> None:
    if not _step_exists(conn, turn_id, seq):
        conn.execute(
            turn_steps.insert().values(
                turn_id=turn_id,
                seq=seq,
                kind=kind,
                status="started",
                input=input,
                idempotency_key=f"{turn_id}:{seq}",
                started_at=utcnow(),
            )
        )


def _finish_step(
    conn: Connection,
    turn_id: int,
    seq: int,
    *,
    kind: StepKind,
    status: StepStatus,
    output: JsonValue,
) -> None:
    now = utcnow()
    if not _step_exists(conn, turn_id, seq):
        conn.execute(
            turn_steps.insert().values(
                turn_id=turn_id,
                seq=seq,
                kind=kind,
                status=status,
                output=output,
                idempotency_key=f"{turn_id}:{seq}",
                started_at=now,
                finished_at=now,
            )
        )
        return
    conn.execute(
        update(turn_steps)
        .where(turn_steps.c.turn_id == turn_id, turn_steps.c.seq == seq)
        .values(status=status, output=output, finished_at=now)
    )


def _reply_intent(
    conn: Connection, turn: TurnRecord, seq: int, *, role: Role, text: str, delivery_key: str
) -> int:
    now = utcnow()
    message_id = _insert(
        conn,
        messages,
        conversation_id=turn.conversation_id,
        role=role,
        text=text,
        author=None,
        turn_id=turn.id,
        delivery_key=delivery_key,
        created_at=now,
    )
    conn.execute(
        turn_steps.insert().values(
            turn_id=turn.id,
            seq=seq,
            kind="reply",
            status="started",
            input={"role": role, "text": text, "message_id": message_id},
            idempotency_key=delivery_key,
            started_at=now,
        )
    )
    conn.execute(
        update(conversations)
        .where(conversations.c.id == turn.conversation_id)
        .values(updated_at=now)
    )
    return message_id


def _reply_sent(
    conn: Connection,
    turn_id: int,
    seq: int,
    *,
    receipt: str,
    turn_status: TurnStatus | None,
    error: str | None,
) -> None:
    _finish_step(conn, turn_id, seq, kind="reply", status="done", output={"receipt": receipt})
    conn.execute(
        update(messages)
        .where(messages.c.delivery_key == f"{turn_id}:{seq}")
        .values(platform_message_id=receipt)
    )
    if turn_status is not None:
        _finish_turn(conn, turn_id, status=turn_status, error=error)


def _history(
    conn: Connection, conversation_id: str, *, before_turn_id: int, limit: int
) -> list[MessageRecord]:
    query = (
        select(messages)
        .where(
            messages.c.conversation_id == conversation_id,
            messages.c.turn_id < before_turn_id,
            messages.c.role.in_(("user", "assistant")),
        )
        .order_by(messages.c.turn_id.desc(), messages.c.id.desc())
        .limit(limit)
    )
    return [_message(row) for row in reversed(conn.execute(query).all())]


def _messages_after(
    conn: Connection, conversation_id: str, *, after_id: int, limit: int
) -> list[MessageRecord]:
    query = (
        select(messages)
        .where(messages.c.conversation_id == conversation_id, messages.c.id > after_id)
        .order_by(messages.c.id)
        .limit(limit)
    )
    return [_message(row) for row in conn.execute(query).all()]


def _conversation_by_id(conn: Connection, conversation_id: str) -> ConversationRecord | None:
    row = conn.execute(select(conversations).where(conversations.c.id == conversation_id)).first()
    return None if row is None else _conversation(row)


def _list_conversations(conn: Connection, *, platform: str, limit: int) -> list[ConversationRecord]:
    query = (
        select(conversations)
        .where(conversations.c.platform == platform)
        .order_by(conversations.c.updated_at.desc(), conversations.c.id)
        .limit(limit)
    )
    return [_conversation(row) for row in conn.execute(query).all()]


def _open_turn_count(conn: Connection, conversation_id: str | None) -> int:
    query = select(func.count()).select_from(turns).where(turns.c.status.in_(_OPEN))
    if conversation_id is not None:
        query = query.where(turns.c.conversation_id == conversation_id)
    return int(conn.execute(query).scalar_one())


# -- rows to records -----------------------------------------------------------------------


def _key(row: Row[Any]) -> ConversationKey:
    return ConversationKey(
        platform=row.platform,
        workspace=row.workspace,
        channel=row.channel,
        thread=row.thread or None,
    )


def _step(row: Row[Any]) -> StepRecord:
    return StepRecord(
        turn_id=int(row.turn_id),
        seq=row.seq,
        kind=row.kind,
        status=row.status,
        input=row.input,
        output=row.output,
        idempotency_key=row.idempotency_key,
    )


def _message(row: Row[Any]) -> MessageRecord:
    return MessageRecord(
        id=int(row.id),
        conversation_id=row.conversation_id,
        role=row.role,
        text=row.text,
        author=row.author,
        turn_id=None if row.turn_id is None else int(row.turn_id),
        platform_message_id=row.platform_message_id,
        created_at=row.created_at,
    )


def _conversation(row: Row[Any]) -> ConversationRecord:
    return ConversationRecord(
        id=row.id,
        key=_key(row),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )

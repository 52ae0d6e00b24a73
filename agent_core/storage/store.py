"""The store: the ingress ledger, conversations and their leases, messages, turns, steps.

Every method is one short transaction. Writes that must happen together (the ledger row,
the user's message and the turn; a reply's journal step and its message) share one.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from pydantic import JsonValue
from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.elements import ColumnElement

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
from agent_core.storage.schema import conversations, ingress, messages, turn_steps, turns

_OPEN: tuple[TurnStatus, ...] = ("pending", "running")


class Store:
    """All reads and writes chatgate makes, over one async engine."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    # -- ingress ---------------------------------------------------------------------------

    async def accept_inbound(self, event: InboundMessage) -> Accepted:
        """Ledger the event, store the user's message and open a turn, all or nothing.

        A second delivery of the same (platform, platform_event_id) changes nothing and
        returns what the first one created, with ``duplicate=True``.
        """
        existing = await self._ledgered(event.platform, event.platform_event_id)
        if existing is not None:
            return existing
        now = utcnow()
        try:
            async with self.engine.begin() as conn:
                conversation_id = await self._conversation_id(conn, event.conversation, now)
                message_id = await self._insert_message(
                    conn,
                    conversation_id=conversation_id,
                    role="user",
                    text=event.text,
                    author=event.user,
                    platform_message_id=event.reply_to,
                    now=now,
                )
                turn_id = await self._insert(
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
                await conn.execute(
                    update(messages).where(messages.c.id == message_id).values(turn_id=turn_id)
                )
                await conn.execute(
                    ingress.insert().values(
                        platform=event.platform,
                        event_id=event.platform_event_id,
                        kind=event.kind,
                        conversation_id=conversation_id,
                        message_id=message_id,
                        turn_id=turn_id,
                        payload=event_to_json(event),
                        received_at=event.received_at,
                    )
                )
        except IntegrityError:
            # Another process ledgered the same event between our check and our insert.
            existing = await self._ledgered(event.platform, event.platform_event_id)
            if existing is None:
                raise
            return existing
        return Accepted(
            conversation_id=conversation_id,
            message_id=message_id,
            turn_id=turn_id,
            duplicate=False,
        )

    async def _ledgered(self, platform: str, event_id: str) -> Accepted | None:
        query = select(ingress.c.conversation_id, ingress.c.message_id, ingress.c.turn_id).where(
            ingress.c.platform == platform, ingress.c.event_id == event_id
        )
        async with self.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            return None
        return Accepted(
            conversation_id=row.conversation_id,
            message_id=row.message_id,
            turn_id=row.turn_id,
            duplicate=True,
        )

    async def _conversation_id(
        self, conn: AsyncConnection, key: ConversationKey, now: datetime
    ) -> str:
        values = {
            "platform": key.platform,
            "workspace": key.workspace,
            "channel": key.channel,
            "thread": key.thread or "",
        }
        insert = (
            postgresql.insert(conversations)
            if self.engine.dialect.name == "postgresql"
            else sqlite.insert(conversations)
        )
        await conn.execute(
            insert.values(
                id=uuid.uuid4().hex, created_at=now, updated_at=now, **values
            ).on_conflict_do_nothing(index_elements=list(values))
        )
        conversation_id = (
            await conn.execute(
                select(conversations.c.id).where(
                    *(conversations.c[name] == value for name, value in values.items())
                )
            )
        ).scalar_one()
        await conn.execute(
            update(conversations)
            .where(conversations.c.id == conversation_id)
            .values(updated_at=now)
        )
        return str(conversation_id)

    async def _insert_message(
        self,
        conn: AsyncConnection,
        *,
        conversation_id: str,
        role: Role,
        text: str,
        author: str | None,
        now: datetime,
        turn_id: int | None = None,
        delivery_key: str | None = None,
        platform_message_id: str | None = None,
    ) -> int:
        return await self._insert(
            conn,
            messages,
            conversation_id=conversation_id,
            role=role,
            text=text,
            author=author,
            turn_id=turn_id,
            delivery_key=delivery_key,
            platform_message_id=platform_message_id,
            created_at=now,
        )

    @staticmethod
    async def _insert(conn: AsyncConnection, table: Any, **values: Any) -> int:
        result = await conn.execute(table.insert().values(**values).returning(table.c.id))
        return int(result.scalar_one())

    # -- leases ----------------------------------------------------------------------------

    async def claim_lease(self, conversation_id: str, *, owner: str, ttl: float) -> bool:
        """Take (or renew) the conversation's lease unless another live owner holds it."""
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
        async with self.engine.begin() as conn:
            return (await conn.execute(statement)).rowcount == 1

    async def release_lease(self, conversation_id: str, *, owner: str) -> None:
        """Give the lease up, if this owner still holds it."""
        statement = (
            update(conversations)
            .where(conversations.c.id == conversation_id, conversations.c.lease_owner == owner)
            .values(lease_owner=None, lease_expires_at=None)
        )
        async with self.engine.begin() as conn:
            await conn.execute(statement)

    async def conversations_needing_work(self, *, limit: int = 500) -> list[str]:
        """Conversations with an open turn and no live lease: what a sweeper should run."""
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
        async with self.engine.connect() as conn:
            return [str(cid) for cid in (await conn.execute(query)).scalars()]

    # -- turns and their journal -----------------------------------------------------------

    async def next_open_turn(self, conversation_id: str) -> TurnRecord | None:
        """The conversation's oldest turn that has not finished, with its journal."""
        query = (
            select(turns.c.id)
            .where(turns.c.conversation_id == conversation_id, turns.c.status.in_(_OPEN))
            .order_by(turns.c.id)
            .limit(1)
        )
        async with self.engine.connect() as conn:
            turn_id = (await conn.execute(query)).scalar()
        return None if turn_id is None else await self.load_turn(int(turn_id))

    async def load_turn(self, turn_id: int) -> TurnRecord:
        """A turn, the message that triggered it, and every journaled step in order."""
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
        steps_query = select(turn_steps).where(turn_steps.c.turn_id == turn_id).order_by("seq")
        async with self.engine.connect() as conn:
            row = (await conn.execute(query)).one()
            steps = (await conn.execute(steps_query)).all()
        return TurnRecord(
            id=int(row.id),
            conversation_id=row.conversation_id,
            conversation=ConversationKey(
                platform=row.platform,
                workspace=row.workspace,
                channel=row.channel,
                thread=row.thread or None,
            ),
            status=row.status,
            attempts=int(row.attempts),
            user=row.user_id,
            trigger_message_id=int(row.trigger_message_id),
            trigger_text=row.trigger_text,
            reply_to=row.reply_to,
            created_at=row.created_at,
            steps=tuple(_step(step) for step in steps),
        )

    async def start_turn(self, turn_id: int) -> None:
        """Mark a turn running and count the attempt (a restart makes a second one)."""
        async with self.engine.begin() as conn:
            await conn.execute(
                update(turns)
                .where(turns.c.id == turn_id)
                .values(
                    status="running",
                    attempts=turns.c.attempts + 1,
                    started_at=func.coalesce(turns.c.started_at, utcnow()),
                )
            )

    async def finish_turn(self, turn_id: int, *, status: TurnStatus, error: str | None) -> None:
        """Close a turn for good."""
        async with self.engine.begin() as conn:
            await conn.execute(
                update(turns)
                .where(turns.c.id == turn_id)
                .values(status=status, error=error, finished_at=utcnow())
            )

    async def begin_step(self, turn_id: int, seq: int, *, kind: StepKind, input: JsonValue) -> None:
        """Journal that a step is about to happen (idempotent: a redo keeps the first row)."""
        async with self.engine.begin() as conn:
            exists = await conn.execute(
                select(turn_steps.c.id).where(
                    turn_steps.c.turn_id == turn_id, turn_steps.c.seq == seq
                )
            )
            if exists.first() is None:
                await conn.execute(
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

    async def finish_step(
        self, turn_id: int, seq: int, *, status: StepStatus, output: JsonValue
    ) -> None:
        """Journal a step's outcome."""
        async with self.engine.begin() as conn:
            await self._finish_step(conn, turn_id, seq, status=status, output=output)

    @staticmethod
    async def _finish_step(
        conn: AsyncConnection, turn_id: int, seq: int, *, status: StepStatus, output: JsonValue
    ) -> None:
        await conn.execute(
            update(turn_steps)
            .where(turn_steps.c.turn_id == turn_id, turn_steps.c.seq == seq)
            .values(status=status, output=output, finished_at=utcnow())
        )

    async def record_reply_intent(
        self, turn: TurnRecord, seq: int, *, role: Role, text: str, delivery_key: str
    ) -> int:
        """Journal the reply step and add the reply to the history in one transaction."""
        now = utcnow()
        async with self.engine.begin() as conn:
            message_id = await self._insert_message(
                conn,
                conversation_id=turn.conversation_id,
                role=role,
                text=text,
                author=None,
                turn_id=turn.id,
                delivery_key=delivery_key,
                now=now,
            )
            await conn.execute(
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
            await conn.execute(
                update(conversations)
                .where(conversations.c.id == turn.conversation_id)
                .values(updated_at=now)
            )
        return message_id

    async def record_reply_sent(self, turn_id: int, seq: int, *, receipt: str) -> None:
        """Journal the platform's receipt for a delivered reply."""
        key = f"{turn_id}:{seq}"
        async with self.engine.begin() as conn:
            await self._finish_step(conn, turn_id, seq, status="done", output={"receipt": receipt})
            await conn.execute(
                update(messages)
                .where(messages.c.delivery_key == key)
                .values(platform_message_id=receipt)
            )

    # -- conversations and history ---------------------------------------------------------

    async def history(
        self, conversation_id: str, *, before_turn_id: int, limit: int
    ) -> list[MessageRecord]:
        """The user and assistant messages of earlier turns, oldest first (at most ``limit``).

        Ordered by turn, then message: a reply belongs after the question it answered even
        when later questions were stored before it.
        """
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
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [_message(row) for row in reversed(rows)]

    async def messages_after(
        self, conversation_id: str, *, after_id: int = 0, limit: int = 500
    ) -> list[MessageRecord]:
        """A conversation's messages with ids above ``after_id``, in order."""
        query = (
            select(messages)
            .where(messages.c.conversation_id == conversation_id, messages.c.id > after_id)
            .order_by(messages.c.id)
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            return [_message(row) for row in (await conn.execute(query)).all()]

    async def conversation(self, conversation_id: str) -> ConversationRecord | None:
        """One conversation by id, or None."""
        query = select(conversations).where(conversations.c.id == conversation_id)
        async with self.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _conversation(row)

    async def list_conversations(
        self, *, platform: str, limit: int = 200
    ) -> list[ConversationRecord]:
        """A platform's conversations, most recently active first."""
        query = (
            select(conversations)
            .where(conversations.c.platform == platform)
            .order_by(conversations.c.updated_at.desc(), conversations.c.id)
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            return [_conversation(row) for row in (await conn.execute(query)).all()]

    async def open_turn_count(self, conversation_id: str | None = None) -> int:
        """How many turns have not finished (in one conversation, or anywhere)."""
        conditions: list[ColumnElement[bool]] = [turns.c.status.in_(_OPEN)]
        if conversation_id is not None:
            conditions.append(turns.c.conversation_id == conversation_id)
        query = select(func.count()).select_from(turns).where(and_(*conditions))
        async with self.engine.connect() as conn:
            return int((await conn.execute(query)).scalar_one())


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
        key=ConversationKey(
            platform=row.platform,
            workspace=row.workspace,
            channel=row.channel,
            thread=row.thread or None,
        ),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


__all__: Sequence[str] = ("Store",)

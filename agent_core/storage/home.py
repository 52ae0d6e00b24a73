"""Reads for a person's own page (:mod:`agent_core.stores.home`): their schedules across
conversations, the approvals still pending, their model use since a time. One façade with
:class:`~agent_core.storage.store.Store`, which inherits :class:`HomeRows`."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, null, select
from sqlalchemy.engine import Connection

from agent_core.events import Platform
from agent_core.records import ApprovalRecord
from agent_core.storage import approvals as approval_sql
from agent_core.storage import journal
from agent_core.storage import schedules as schedule_sql
from agent_core.storage.database import Database
from agent_core.storage.schema import (
    approvals,
    conversations,
    model_usage,
    schedules,
    turns,
)
from agent_core.storage.usage import day_of
from agent_core.stores.home import OwnSchedule, PersonUsage


def schedules_by(conn: Connection, user: str, *, platform: str, limit: int) -> list[OwnSchedule]:
    """Schedules ``user`` created on ``platform`` (not deleted), oldest first, each with
    the key of the conversation it was created in (``ix_schedules_created_by``)."""
    rows = conn.execute(
        select(
            schedules,
            conversations.c.platform,
            conversations.c.workspace,
            conversations.c.channel,
            conversations.c.thread,
        )
        .join(conversations, conversations.c.id == schedules.c.conversation_id)
        .where(
            schedules.c.created_by == user,
            schedules.c.status != "deleted",
            conversations.c.platform == platform,
        )
        .order_by(schedules.c.created_at, schedules.c.id)
        .limit(limit)
    ).all()
    return [
        OwnSchedule(schedule=schedule_sql.record(row), conversation=journal.conversation_key(row))
        for row in rows
    ]


def pending(conn: Connection, *, now: datetime, limit: int) -> list[ApprovalRecord]:
    """Undecided approvals that have not expired, newest first (``ix_approvals_status_expires``)."""
    rows = conn.execute(
        select(
            approvals,
            conversations.c.platform,
            conversations.c.workspace,
            conversations.c.channel,
            conversations.c.thread,
            null().label("prompt_message_id"),  # not shown: the page has its own buttons
        )
        .join(conversations, conversations.c.id == approvals.c.conversation_id)
        .where(
            approvals.c.status == "pending",
            approvals.c.expires_at > now,
            # A question is answered where it was asked, by the person asked.
            approvals.c.kind != "question",
        )
        .order_by(approvals.c.created_at.desc(), approvals.c.id)
        .limit(limit)
    ).all()
    return [approval_sql.record(row) for row in rows]


def usage_by(conn: Connection, user: str, *, since: datetime) -> PersonUsage:
    """Turns ``user`` opened and the model's tokens and cost on their behalf since ``since``
    (``ix_turns_user_id``, ``ix_model_usage_user_id_day``)."""
    spent = conn.execute(
        select(
            func.coalesce(func.sum(model_usage.c.prompt_tokens), 0),
            func.coalesce(func.sum(model_usage.c.completion_tokens), 0),
            func.coalesce(func.sum(model_usage.c.cost_usd), 0.0),
        ).where(model_usage.c.user_id == user, model_usage.c.day >= day_of(since))
    ).one()
    opened = conn.execute(
        select(func.count()).where(turns.c.user_id == user, turns.c.created_at >= since)
    ).scalar_one()
    return PersonUsage(
        since=since,
        turns=int(opened),
        prompt_tokens=int(spent[0]),
        completion_tokens=int(spent[1]),
        cost_usd=float(spent[2]),
    )


class HomeRows:
    """A person's own page, over :attr:`database`."""

    database: Database

    async def schedules_by(self, user: str, *, platform: Platform, limit: int) -> list[OwnSchedule]:
        """The schedules ``user`` created on ``platform`` (not deleted), oldest first."""
        return await self.database.read(schedules_by, user, platform=platform, limit=limit)

    async def pending_approvals(self, *, now: datetime, limit: int) -> list[ApprovalRecord]:
        """Undecided, unexpired approvals, newest first."""
        return await self.database.read(pending, now=now, limit=limit)

    async def usage_by(self, user: str, *, since: datetime) -> PersonUsage:
        """``user``'s turns, tokens and cost since ``since``."""
        return await self.database.read(usage_by, user, since=since)

"""Approvals and conversation grants: the transactions behind ``Store``'s approval methods.

Nothing waits in memory for a decision: the pending row is the waiting. Deciding is a
compare-and-set on ``status = 'pending'``, so the first answer wins and a double press
changes nothing.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, bindparam, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Row

from agent_core.events import utcnow
from agent_core.records import (
    ApprovalRecord,
    ApprovalRequest,
    ApprovalStatus,
    TurnRecord,
)
from agent_core.storage import audit, journal
from agent_core.storage.jobs import requeue_waiting
from agent_core.storage.schema import approvals, conversations, grants, messages, turn_steps, turns

_PROMPT = (
    select(messages.c.platform_message_id)
    .where(messages.c.approval_id == approvals.c.id, messages.c.role == "approval")
    .limit(1)
    .scalar_subquery()
)
_APPROVAL = select(
    approvals,
    conversations.c.platform,
    conversations.c.workspace,
    conversations.c.channel,
    conversations.c.thread,
    _PROMPT.label("prompt_message_id"),
).join(conversations, conversations.c.id == approvals.c.conversation_id)
_BY_ID = _APPROVAL.where(approvals.c.id == bindparam("b_id"))
BY_STEP = _APPROVAL.where(
    approvals.c.turn_id == bindparam("b_turn"), approvals.c.seq == bindparam("b_seq")
)
_DECIDE = (
    update(approvals)
    .where(approvals.c.id == bindparam("b_id"), approvals.c.status == "pending")
    .values(
        status=bindparam("b_status"),
        decided_by=bindparam("b_user"),
        decided_at=bindparam("b_now"),
        answer=bindparam("b_answer"),
    )
)
_RESUME = (
    update(turns)
    .where(turns.c.id == bindparam("b_turn"), turns.c.status == "waiting")
    .values(status="pending")
)
# Waiting is progress, not failure: the counts that give up a turn that keeps crashing
# start again.
_SUSPEND = (
    update(turns)
    .where(turns.c.id == bindparam("b_turn"), turns.c.status.in_(("running", "pending")))
    .values(status="waiting", attempts=0, stalls=0, stalled_at=None)
)
_GRANT = {
    "sqlite": sqlite.insert(grants).on_conflict_do_nothing(),
    "postgresql": postgresql.insert(grants).on_conflict_do_nothing(),
}


def new_approval_id() -> str:
    """An opaque id: 15 characters, 48 random bits."""
    return f"ap_{secrets.token_hex(6)}"


def request(conn: Connection, turn: TurnRecord, seq: int, asked: ApprovalRequest) -> ApprovalRecord:
    """Create the approval, its prompt in the history and (for tools) its journal step.

    Idempotent per (turn, seq): a resumed turn gets the approval it already asked for.
    """
    existing = conn.execute(BY_STEP, {"b_turn": turn.id, "b_seq": seq}).first()
    if existing is not None:
        return record(existing)
    now = utcnow()
    approval_id = new_approval_id()
    conn.execute(
        insert(approvals),
        {
            "id": approval_id,
            "turn_id": turn.id,
            "seq": seq,
            "conversation_id": turn.conversation_id,
            "kind": asked.kind,
            "tool": asked.tool,
            "arguments": asked.arguments,
            "requested_by": turn.user,
            "approvers": list(asked.approvers),
            "self_approve": asked.self_approve,
            "always_allow": asked.always_allow,
            "route": asked.route,
            "escalate_to": list(asked.escalate_to) or None,
            "status": "pending",
            "expires_at": asked.expires_at,
            "created_at": now,
        },
    )
    conn.execute(
        insert(messages),
        {
            "conversation_id": turn.conversation_id,
            "role": "approval",
            "text": asked.prompt_text,
            "turn_id": turn.id,
            "approval_id": approval_id,
            "delivery_key": f"{turn.id}:{seq}:prompt",
            "created_at": now,
        },
    )
    if asked.kind in ("tool", "question"):
        conn.execute(
            insert(turn_steps),
            {
                "turn_id": turn.id,
                "seq": seq,
                "kind": "approval",
                "status": "started",
                "input": {
                    "approval_id": approval_id,
                    "call_id": asked.call_id,
                    "tool": asked.tool,
                },
                "idempotency_key": f"{turn.id}:{seq}",
                "started_at": now,
            },
        )
    row = conn.execute(_BY_ID, {"b_id": approval_id}).one()
    return record(row)


def prompt_sent(conn: Connection, approval_id: str, *, turn_id: int, receipt: str) -> bool:
    """Record the prompt's receipt and suspend the turn until someone decides; False when
    someone decided already (the prompt is visible before its receipt is stored)."""
    conn.execute(
        update(messages)
        .where(messages.c.approval_id == approval_id, messages.c.role == "approval")
        .values(platform_message_id=receipt)
    )
    return suspend(conn, turn_id, approval_id)


def suspend(conn: Connection, turn_id: int, approval_id: str) -> bool:
    """The turn waits for ``approval_id``: the sweeper leaves it alone and later turns may
    run meanwhile. Not when the approval is decided already (False): a decision that came
    before the turn waited found nothing to resume, so the turn must go on by itself. The
    approval's row is locked first, so a decision is either before this (seen here) or
    after it (and then it resumes the waiting turn)."""
    status = conn.execute(
        select(approvals.c.status).where(approvals.c.id == approval_id).with_for_update()
    ).scalar()
    if status != "pending":
        return False
    conn.execute(_SUSPEND, {"b_turn": turn_id})
    return True


def decide(
    conn: Connection,
    approval_id: str,
    *,
    status: ApprovalStatus,
    user: str,
    note: str,
    answer: str | None = None,
) -> ApprovalRecord | None:
    """Compare-and-set a pending approval; None when it was already decided (or unknown).

    The winner also records a conversation grant (for ``allowed``), adds ``note`` to the
    history, and puts the turn back in the queue. ``answer``: a question's answer.
    """
    now = utcnow()
    # Expiring is for an approval whose time is up: not one another process passed on
    # (``escalate_to``) a moment ago, which waits again.
    statement = _DECIDE.where(approvals.c.expires_at < now) if status == "expired" else _DECIDE
    params = {
        "b_id": approval_id,
        "b_status": status,
        "b_user": user,
        "b_now": now,
        "b_answer": answer,
    }
    if conn.execute(statement, params).rowcount != 1:
        return None
    decided = record(conn.execute(_BY_ID, {"b_id": approval_id}).one())
    if status == "allowed":
        conn.execute(
            _GRANT[conn.dialect.name],
            {
                "conversation_id": decided.conversation_id,
                "tool": decided.tool,
                "granted_by": user,
                "approval_id": approval_id,
                "created_at": now,
            },
        )
    conn.execute(
        insert(messages),
        {
            "conversation_id": decided.conversation_id,
            "role": "system",
            "text": note,
            "turn_id": decided.turn_id,
            "approval_id": approval_id,
            "created_at": now,
        },
    )
    audit.append(
        conn,
        actor=user,
        action=f"approval.{status}",
        subject=decided.tool,
        conversation_id=decided.conversation_id,
        turn_id=decided.turn_id,
        detail={
            "approval": approval_id,
            "requested_by": decided.requested_by,
            "waited_seconds": (
                round((now - decided.created_at).total_seconds(), 3)
                if decided.created_at is not None
                else None
            ),
        },
        now=now,
    )
    conn.execute(_RESUME, {"b_turn": decided.turn_id})
    # A queued turn (a schedule run, ``bg``) goes back to the job queue, not to a lane.
    requeued = requeue_waiting(conn, decided.turn_id)
    return dataclasses.replace(decided, requeued_jobs=tuple(requeued)) if requeued else decided


def due(conn: Connection, now: datetime) -> list[str]:
    """Ids of pending approvals whose time is up."""
    query = select(approvals.c.id).where(
        and_(approvals.c.status == "pending", approvals.c.expires_at < now)
    )
    return [str(i) for i in conn.execute(query).scalars()]


def load(conn: Connection, approval_id: str) -> ApprovalRecord | None:
    """One approval by id."""
    row = conn.execute(_BY_ID, {"b_id": approval_id}).first()
    return None if row is None else record(row)


def for_step(conn: Connection, turn_id: int, seq: int) -> ApprovalRecord | None:
    """The approval a turn asked for at a journal step, if any."""
    row = conn.execute(BY_STEP, {"b_turn": turn_id, "b_seq": seq}).first()
    return None if row is None else record(row)


def load_many(conn: Connection, approval_ids: Sequence[str]) -> dict[str, ApprovalRecord]:
    """Approvals by id (for rendering a page of history)."""
    if not approval_ids:
        return {}
    rows = conn.execute(_APPROVAL.where(approvals.c.id.in_(list(approval_ids)))).all()
    return {row.id: record(row) for row in rows}


def granted_tools(conn: Connection, conversation_id: str, user: str) -> frozenset[str]:
    """Tools this person allowed for the rest of this conversation."""
    query = select(grants.c.tool).where(
        grants.c.conversation_id == conversation_id, grants.c.granted_by == user
    )
    return frozenset(str(tool) for tool in conn.execute(query).scalars())


def record(row: Row[Any]) -> ApprovalRecord:
    return ApprovalRecord(
        id=row.id,
        turn_id=int(row.turn_id),
        seq=int(row.seq),
        conversation_id=row.conversation_id,
        conversation=journal.conversation_key(row),
        kind=row.kind,
        tool=row.tool,
        arguments=row.arguments,
        requested_by=row.requested_by,
        approvers=tuple(row.approvers or ()),
        self_approve=bool(row.self_approve),
        always_allow=bool(row.always_allow),
        status=row.status,
        decided_by=row.decided_by,
        expires_at=row.expires_at,
        prompt_message_id=row.prompt_message_id,
        created_at=row.created_at,
        decided_at=row.decided_at,
        answer=row.answer,
        answering=row.answering,
        route=row.route,
        escalate_to=tuple(row.escalate_to or ()),
    )

"""Reads for replay and evals: which turns a selection names, and a turn as it was recorded
(what its model saw, the tool calls it made and their results, what it cost). The only
write is the spend of replay and eval model calls, so the budgets count them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import and_, exists, func, insert, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import NoResultFound

from agent_core.budgets import Spent
from agent_core.events import utcnow
from agent_core.journaled import ModelCallOutput, Spend
from agent_core.model import ChatMessage
from agent_core.records import StepRecord
from agent_core.replay.recorded import (
    Original,
    RecordedCall,
    RecordedTurn,
    Scenario,
    Selection,
    parse_arguments,
)
from agent_core.storage import journal
from agent_core.storage import usage as usage_sql
from agent_core.storage.database import Database
from agent_core.storage.schema import (
    conversations,
    feedback,
    messages,
    model_usage,
    turn_steps,
    turns,
)

FINISHED = ("done", "failed")
"""Only turns that ended are run again: one still running has no answer to compare with."""


def select_turns(conn: Connection, selection: Selection) -> list[int]:
    """The ids of the finished turns the selection names, oldest first, at most ``limit``;
    each made at least one model call."""
    query = (
        select(turns.c.id)
        .join(conversations, conversations.c.id == turns.c.conversation_id)
        .where(
            turns.c.status.in_(FINISHED),
            exists().where(
                turn_steps.c.turn_id == turns.c.id,
                turn_steps.c.kind == "model_call",
                turn_steps.c.status == "done",
            ),
        )
    )
    if selection.turn_ids:
        query = query.where(turns.c.id.in_(selection.turn_ids))
    if selection.conversation_id is not None:
        query = query.where(turns.c.conversation_id == selection.conversation_id)
    if selection.platform is not None:
        query = query.where(conversations.c.platform == selection.platform)
    if selection.since is not None:
        query = query.where(turns.c.created_at >= selection.since)
    if selection.until is not None:
        query = query.where(turns.c.created_at < selection.until)
    if selection.feedback is not None:
        rated = feedback.c.turn_id == turns.c.id
        if selection.feedback != "any":
            rated = and_(rated, feedback.c.rating == selection.feedback)
        query = query.where(exists().where(rated))
    query = query.order_by(turns.c.id).limit(selection.limit)
    return [int(row) for row in conn.execute(query).scalars()]


def recorded_turn(conn: Connection, turn_id: int, *, history_limit: int) -> RecordedTurn | None:
    """The turn as recorded, or None when there is no such turn or it never called the
    model."""
    try:
        turn = journal.load_turn(conn, turn_id)
    except (LookupError, NoResultFound):  # no such turn, or it has no opening message
        return None
    timed = conn.execute(
        select(turn_steps.c.seq, turn_steps.c.started_at, turn_steps.c.finished_at).where(
            turn_steps.c.turn_id == turn_id, turn_steps.c.kind == "model_call"
        )
    ).all()
    seconds = {
        int(row.seq): (row.finished_at - row.started_at).total_seconds()
        for row in timed
        if row.finished_at is not None and row.started_at is not None
    }
    texts = [turn.trigger_text]
    outputs: list[tuple[int, ModelCallOutput]] = []
    calls: dict[str, RecordedCall] = {}
    approvals: dict[int, str] = {}
    for step in turn.steps:
        if step.kind == "steer" and isinstance(step.input, dict):
            taken = step.input.get("texts")
            texts += [t for t in taken if isinstance(t, str)] if isinstance(taken, list) else []
        elif step.kind == "model_call" and step.status != "started":
            outputs.append((step.seq, ModelCallOutput.from_json(step.output)))
        elif step.kind == "approval" and isinstance(step.output, dict):
            decision = str(step.output.get("decision", ""))
            approvals[step.seq + 1] = f"{decision} by {step.output.get('decided_by') or '-'}"
    if not outputs:
        return None
    by_seq = {step.seq: step for step in turn.steps}
    ordered: list[RecordedCall] = []
    for seq, output in outputs:
        for index, call in enumerate(output.tool_calls):
            found = _call(by_seq.get(seq + 2 + 2 * index), call.id)
            if found is None:  # taken-in messages moved the seqs: find it by its call id
                found = next((s for s in turn.steps if _call(s, call.id) is not None), None)
            if found is None or not isinstance(found.output, dict):
                continue  # never finished (ambiguous, or still waiting): nothing to serve
            recorded = RecordedCall(
                name=call.name,
                arguments=parse_arguments(call.arguments),
                result=str(found.output.get("content", "")),
                status=str(found.output.get("status", "ok")),
                approval=approvals.get(found.seq),
            )
            calls[call.id] = recorded
            ordered.append(recorded)
    last = outputs[-1][1]
    spends = [output.spend for _seq, output in outputs]
    original = Original(
        text=last.text,
        role=last.role,
        model=next((o.model for _s, o in reversed(outputs) if o.model), None),
        calls=tuple(ordered),
        model_calls=sum(1 for _s, o in outputs if o.error is None or o.model),
        prompt_tokens=sum(s.prompt_tokens or 0 for s in spends),
        completion_tokens=sum(s.completion_tokens or 0 for s in spends),
        cost_usd=sum(s.cost_usd or 0.0 for s in spends),
        seconds=sum(seconds.get(seq, 0.0) for seq, _o in outputs),
    )
    summary, history = _past(conn, turn.conversation_id, turn_id, limit=history_limit)
    ratings = conn.execute(
        select(feedback.c.rating).where(feedback.c.turn_id == turn_id).order_by(feedback.c.id)
    ).scalars()
    return RecordedTurn(
        id=turn.id,
        conversation_id=turn.conversation_id,
        platform=turn.conversation.platform,
        user=turn.user,
        created_at=turn.created_at,
        status=turn.status,
        scenario=Scenario(messages=tuple(texts), history=history, summary=summary),
        original=original,
        ratings=tuple(str(r) for r in ratings),
    )


def _call(step: StepRecord | None, call_id: str) -> StepRecord | None:
    """``step`` when it is the finished tool call ``call_id``."""
    if step is None or step.kind != "tool_call" or not isinstance(step.output, dict):
        return None
    return step if step.output.get("call_id") == call_id else None


def _past(
    conn: Connection, conversation_id: str, turn_id: int, *, limit: int
) -> tuple[str | None, tuple[ChatMessage, ...]]:
    """The running summary and the history the turn's first model call read, as far as
    they can still be known: today's summary when it covers only turns before this one (a
    summary made later that reaches past the turn is not what it saw, and is left out),
    and the messages of earlier turns after it, newest ``limit``."""
    row = conn.execute(
        select(
            conversations.c.summary, conversations.c.summary_turn, conversations.c.history_from
        ).where(conversations.c.id == conversation_id)
    ).one()
    summary, after = None, 0
    if row.summary and row.summary_turn is not None and row.summary_turn < turn_id:
        summary, after = str(row.summary), int(row.summary_turn)
    query = (
        select(messages.c.role, messages.c.text)
        .where(
            messages.c.conversation_id == conversation_id,
            messages.c.turn_id < turn_id,
            messages.c.turn_id > after,
            messages.c.role.in_(("user", "assistant")),
            messages.c.id > func.coalesce(row.history_from, 0),
        )
        .order_by(messages.c.turn_id.desc(), messages.c.id.desc())
        .limit(limit)
    )
    lines = list(reversed(conn.execute(query).all()))
    return summary, tuple(
        ChatMessage(role="assistant" if r.role == "assistant" else "user", content=r.text)
        for r in lines
    )


def record_spend(conn: Connection, actor: str, spend: Spend, *, now: datetime) -> None:
    """Count a replay or eval model call against ``actor`` (no conversation, no turn), so
    the daily budgets see it."""
    if not spend.any:
        return
    conn.execute(
        insert(model_usage).values(
            day=usage_sql.day_of(now),
            user_id=actor,
            conversation_id=None,
            turn_id=None,
            model=spend.model or "",
            prompt_tokens=spend.prompt_tokens or 0,
            completion_tokens=spend.completion_tokens or 0,
            cost_usd=spend.cost_usd or 0.0,
            created_at=now,
        )
    )


def spent_by(conn: Connection, actor: str, *, now: datetime) -> Spent:
    """What ``actor`` and everyone spent today (the daily budgets)."""
    day = usage_sql.day_of(now)
    tokens = func.coalesce(
        func.sum(model_usage.c.prompt_tokens + model_usage.c.completion_tokens), 0
    )
    cost = func.coalesce(func.sum(model_usage.c.cost_usd), 0.0)
    mine = conn.execute(
        select(tokens, cost).where(model_usage.c.user_id == actor, model_usage.c.day == day)
    ).one()
    everyone = conn.execute(select(cost).where(model_usage.c.day == day)).scalar_one()
    return Spent(user_day_tokens=int(mine[0]), user_day_usd=float(mine[1]), day_usd=float(everyone))


class Recordings:
    """What replay and evals ask of the database: journaled turns to read, and their own
    model calls to count (the only write)."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def select(self, selection: Selection) -> list[int]:
        """The turns a selection names."""
        return await self.database.read_long(select_turns, selection)

    async def turn(self, turn_id: int, *, history_limit: int) -> RecordedTurn | None:
        """One turn as recorded."""
        return await self.database.read_long(recorded_turn, turn_id, history_limit=history_limit)

    async def record_replay_spend(self, actor: str, spend: Spend) -> None:
        """Count a replay or eval model call."""
        await self.database.write(record_spend, actor, spend, now=utcnow())

    async def replay_spending(self, actor: str) -> Spent:
        """What ``actor`` and everyone spent today."""
        return await self.database.read(spent_by, actor, now=utcnow())

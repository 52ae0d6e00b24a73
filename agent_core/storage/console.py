"""What the operator console reads: conversations, turns and their journal, approvals,
schedules and runs, as JSON-ready dictionaries (people, spend and health:
``console_usage``).

Every list is a page: newest first, ``limit`` at a time, with a cursor for the next page
that an index serves (no OFFSET), so a page costs the same over a hundred turns or a
hundred thousand."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import JsonValue
from sqlalchemy import and_, func, or_, select
from sqlalchemy.engine import Connection

from agent_core.storage import feedback
from agent_core.storage import jobs as job_sql
from agent_core.storage.schema import (
    approvals,
    conversations,
    jobs,
    messages,
    model_usage,
    schedule_runs,
    schedule_targets,
    schedules,
    turn_steps,
    turns,
)

Json = dict[str, JsonValue]
_SNIPPET = 160
_RESULT_SHOWN = 4000


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _like(query: str) -> str:
    escaped = query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _holds(conn: Connection, column: Any, query: str) -> Any:
    """``column`` holds ``query``, in any case of any script: SQLite folds with Python's
    casefold (its own lower() knows ASCII only), PostgreSQL's ILIKE with the database's."""
    if conn.dialect.name == "sqlite":
        return func.chatgate_fold(column).like(_like(query.casefold()), escape="\\")
    # ILIKE lowercases both sides (casefold's "ss" for "ß" would match nothing there).
    return column.ilike(_like(query), escape="\\")


def _older(at: Any, key: Any, cursor: str) -> Any:
    """Rows after a ``WHEN|ID`` page cursor in (``at``, ``key``) descending order: ties
    on the time are split by the id, so no row is skipped or shown twice."""
    when, _sep, last = cursor.partition("|")
    moment = datetime.fromisoformat(when)
    return or_(at < moment, and_(at == moment, key < last))


def _cursor(at: datetime, key: object) -> str:
    return f"{at.isoformat()}|{key}"


def _snippet(text: str | None, around: str | None = None) -> str | None:
    """A short piece of ``text``, centred on ``around`` when it is in it."""
    if text is None:
        return None
    at = text.lower().find(around.lower()) if around else -1
    start = max(0, at - _SNIPPET // 3) if at >= 0 else 0
    piece = text[start : start + _SNIPPET]
    return ("…" if start else "") + piece + ("…" if start + _SNIPPET < len(text) else "")


def _ms(started: datetime | None, finished: datetime | None) -> int | None:
    if started is None or finished is None:
        return None
    return int((finished - started).total_seconds() * 1000)


def link(platform: str, workspace: str, channel: str, receipt: str | None) -> str | None:
    """A link that opens the platform's own message, where the platform has one without an
    API call (Discord; Telegram supergroups); Slack's needs the workspace's domain, so the
    channel (``app_redirect``) is what it gets."""
    if not receipt:
        return None
    if platform == "discord":
        return f"https://discord.com/channels/{workspace}/{channel}/{receipt}"
    if platform == "telegram" and channel.startswith("-100"):
        return f"https://t.me/c/{channel[4:]}/{receipt}"
    if platform == "slack":
        return f"https://slack.com/app_redirect?team={workspace}&channel={channel}"
    return None


# -- conversations ---------------------------------------------------------------------------

_TURN_COUNT = (
    select(func.count())
    .where(turns.c.conversation_id == conversations.c.id)
    .scalar_subquery()
    .label("turn_count")
)
_LAST_TEXT = (
    select(messages.c.text)
    .where(messages.c.conversation_id == conversations.c.id)
    .order_by(messages.c.id.desc())
    .limit(1)
    .scalar_subquery()
    .label("last_text")
)


def _conversation(row: Any, snippet: str | None) -> Json:
    return {
        "id": row.id,
        "platform": row.platform,
        "workspace": row.workspace,
        "channel": row.channel,
        "thread": row.thread or None,
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
        "turns": int(row.turn_count),
        "snippet": snippet,
    }


def conversations_page(
    conn: Connection,
    *,
    query: str | None = None,
    platform: str | None = None,
    before: str | None = None,
    limit: int = 50,
) -> Json:
    """Conversations on every platform, most recently active first; with ``query``, those
    whose messages hold it (case-insensitive), by their latest matching message."""
    if query:
        return _search(conn, query, platform=platform, before=before, limit=limit)
    statement = select(conversations, _TURN_COUNT, _LAST_TEXT)
    if platform:
        statement = statement.where(conversations.c.platform == platform)
    if before:
        statement = statement.where(_older(conversations.c.updated_at, conversations.c.id, before))
    rows = conn.execute(
        statement.order_by(conversations.c.updated_at.desc(), conversations.c.id.desc()).limit(
            limit
        )
    ).all()
    items: list[JsonValue] = [_conversation(row, _snippet(row.last_text)) for row in rows]
    following = f"{rows[-1].updated_at.isoformat()}|{rows[-1].id}" if len(rows) == limit else None
    return {"items": items, "next": following}


def _search(
    conn: Connection, query: str, *, platform: str | None, before: str | None, limit: int
) -> Json:
    hits = (
        select(messages.c.conversation_id, func.max(messages.c.id).label("hit"))
        .where(_holds(conn, messages.c.text, query))
        .group_by(messages.c.conversation_id)
    )
    if before:
        hits = hits.having(func.max(messages.c.id) < int(before))
    found = hits.subquery()
    statement = (
        select(conversations, _TURN_COUNT, found.c.hit, messages.c.text.label("hit_text"))
        .join(found, found.c.conversation_id == conversations.c.id)
        .join(messages, messages.c.id == found.c.hit)
    )
    if platform:
        statement = statement.where(conversations.c.platform == platform)
    rows = conn.execute(statement.order_by(found.c.hit.desc()).limit(limit)).all()
    items: list[JsonValue] = [_conversation(row, _snippet(row.hit_text, query)) for row in rows]
    return {"items": items, "next": str(rows[-1].hit) if len(rows) == limit else None}


def conversation_messages(
    conn: Connection, conversation_id: str, *, before: int | None = None, limit: int = 100
) -> list[JsonValue]:
    """The conversation's messages, newest first, ``limit`` at a time."""
    statement = select(messages).where(messages.c.conversation_id == conversation_id)
    if before is not None:
        statement = statement.where(messages.c.id < before)
    rows = conn.execute(statement.order_by(messages.c.id.desc()).limit(limit)).all()
    return [
        {
            "id": int(row.id),
            "role": row.role,
            "author": row.author,
            "text": row.text,
            "turn_id": row.turn_id,
            "receipt": row.platform_message_id,
            "created_at": iso(row.created_at),
        }
        for row in rows
    ]


# -- turns -----------------------------------------------------------------------------------

_TOKENS = (
    select(
        func.coalesce(func.sum(model_usage.c.prompt_tokens + model_usage.c.completion_tokens), 0)
    )
    .where(model_usage.c.turn_id == turns.c.id)
    .scalar_subquery()
    .label("tokens")
)
_COST = (
    select(func.coalesce(func.sum(model_usage.c.cost_usd), 0.0))
    .where(model_usage.c.turn_id == turns.c.id)
    .scalar_subquery()
    .label("cost_usd")
)
_TOOL_CALLS = (
    select(func.count())
    .where(turn_steps.c.turn_id == turns.c.id, turn_steps.c.kind == "tool_call")
    .scalar_subquery()
    .label("tool_calls")
)
_ASKED = (
    select(messages.c.text)
    .where(messages.c.turn_id == turns.c.id, messages.c.role == "user")
    .order_by(messages.c.id)
    .limit(1)
    .scalar_subquery()
    .label("asked")
)


def turns_page(
    conn: Connection,
    *,
    conversation_id: str | None = None,
    user: str | None = None,
    status: str | None = None,
    before: int | None = None,
    limit: int = 50,
) -> Json:
    """Turns newest first, with what each cost and how many tools it ran."""
    statement = select(
        turns.c.id,
        turns.c.conversation_id,
        turns.c.user_id,
        turns.c.status,
        turns.c.attempts,
        turns.c.lane,
        turns.c.error,
        turns.c.prompt,
        turns.c.created_at,
        turns.c.finished_at,
        conversations.c.platform,
        conversations.c.channel,
        _TOKENS,
        _COST,
        _TOOL_CALLS,
        _ASKED,
    ).join(conversations, conversations.c.id == turns.c.conversation_id)
    if conversation_id:
        statement = statement.where(turns.c.conversation_id == conversation_id)
    if user:
        statement = statement.where(turns.c.user_id == user)
    if status:
        statement = statement.where(turns.c.status == status)
    if before is not None:
        statement = statement.where(turns.c.id < before)
    rows = conn.execute(statement.order_by(turns.c.id.desc()).limit(limit)).all()
    items: list[JsonValue] = [
        {
            "id": int(row.id),
            "conversation_id": row.conversation_id,
            "platform": row.platform,
            "channel": row.channel,
            "user": row.user_id,
            "status": row.status,
            "attempts": int(row.attempts),
            "lane": row.lane,
            "error": row.error,
            "asked": _snippet(row.asked if row.asked is not None else row.prompt),
            "created_at": iso(row.created_at),
            "finished_at": iso(row.finished_at),
            "tokens": int(row.tokens),
            "cost_usd": float(row.cost_usd),
            "tool_calls": int(row.tool_calls),
        }
        for row in rows
    ]
    return {"items": items, "next": int(rows[-1].id) if len(rows) == limit else None}


def timeline(conn: Connection, turn_id: int) -> Json | None:
    """One turn from its journal: each model call (tokens, cost, latency, context), each
    tool call (arguments, result, duration, its approval), recoveries after a crash, and
    the messages with their delivery receipts."""
    row = conn.execute(
        select(turns, conversations.c.platform, conversations.c.workspace, conversations.c.channel)
        .join(conversations, conversations.c.id == turns.c.conversation_id)
        .where(turns.c.id == turn_id)
    ).first()
    if row is None:
        return None
    asked = {
        int(a.seq): _approval(a) for a in conn.execute(
            select(approvals).where(approvals.c.turn_id == turn_id)
        ).all()
    }  # fmt: skip
    steps: list[JsonValue] = []
    for step in conn.execute(
        select(turn_steps).where(turn_steps.c.turn_id == turn_id).order_by(turn_steps.c.seq)
    ).all():
        steps.append(_step(step, asked))
    said: list[JsonValue] = [
        {
            "id": int(m.id),
            "role": m.role,
            "author": m.author,
            "text": m.text,
            "receipt": m.platform_message_id,
            "link": link(row.platform, row.workspace, row.channel, m.platform_message_id),
            "created_at": iso(m.created_at),
        }
        for m in conn.execute(
            select(messages).where(messages.c.turn_id == turn_id).order_by(messages.c.id)
        ).all()
    ]
    spent = conn.execute(
        select(
            func.coalesce(func.sum(model_usage.c.prompt_tokens), 0),
            func.coalesce(func.sum(model_usage.c.completion_tokens), 0),
            func.coalesce(func.sum(model_usage.c.cost_usd), 0.0),
        ).where(model_usage.c.turn_id == turn_id)
    ).one()
    return {
        "id": int(row.id),
        "conversation_id": row.conversation_id,
        "platform": row.platform,
        "channel": row.channel,
        "user": row.user_id,
        "status": row.status,
        "lane": row.lane,
        "attempts": int(row.attempts),
        "stalls": int(row.stalls),
        "error": row.error,
        "prompt": row.prompt,
        "stopped_by": row.stop_requested_by,
        "merged_into": row.merged_into,
        "created_at": iso(row.created_at),
        "started_at": iso(row.started_at),
        "finished_at": iso(row.finished_at),
        "prompt_tokens": int(spent[0]),
        "completion_tokens": int(spent[1]),
        "cost_usd": float(spent[2]),
        "steps": steps,
        "approvals": list(asked.values()),
        "messages": said,
        "feedback": feedback.for_turn(conn, turn_id),
    }


def _step(step: Any, asked: dict[int, Json]) -> Json:
    given = step.input if isinstance(step.input, dict) else {}
    output = step.output if isinstance(step.output, dict) else {}
    item: Json = {
        "seq": int(step.seq),
        "kind": step.kind,
        "status": step.status,
        "started_at": iso(step.started_at),
        "finished_at": iso(step.finished_at),
        "ms": _ms(step.started_at, step.finished_at),
    }
    if step.kind == "model_call":
        calls = output.get("tool_calls")
        item.update(
            model=output.get("model") or given.get("model"),
            profile=given.get("profile"),
            prompt_tokens=output.get("prompt_tokens"),
            completion_tokens=output.get("completion_tokens"),
            cost_usd=output.get("cost_usd"),
            context_tokens=output.get("context_tokens") or {},
            messages=output.get("messages"),
            text=output.get("text"),
            error=output.get("error"),
            tool_calls=[
                c.get("name") for c in calls if isinstance(c, dict)
            ] if isinstance(calls, list) else [],
        )  # fmt: skip
    elif step.kind == "tool_call":
        content = output.get("content")
        shown = content[:_RESULT_SHOWN] if isinstance(content, str) else content
        item.update(
            tool=given.get("name"),
            arguments=given.get("arguments"),
            outcome=output.get("status"),
            result=shown,
            truncated=isinstance(content, str) and len(content) > _RESULT_SHOWN,
            approval=asked.get(int(step.seq) - 1),
            # A call a crash cut off: the person was asked whether to run it again.
            recovery=asked.get(int(step.seq)),
        )
    elif step.kind == "approval":
        asking = asked.get(int(step.seq))
        item.update(
            tool=asking["tool"] if asking else None,
            arguments=asking["arguments"] if asking else None,
            approval=asking,
        )
    else:
        item.update(input=step.input, output=step.output)
    return item


def _approval(row: Any) -> Json:
    waited = (
        (row.decided_at - row.created_at).total_seconds() if row.decided_at is not None else None
    )
    return {
        "id": row.id,
        "turn_id": int(row.turn_id),
        "seq": int(row.seq),
        "conversation_id": row.conversation_id,
        "kind": row.kind,
        "tool": row.tool,
        "arguments": row.arguments,
        "requested_by": row.requested_by,
        "approvers": row.approvers,
        "status": row.status,
        "decided_by": row.decided_by,
        "decided_at": iso(row.decided_at),
        "created_at": iso(row.created_at),
        "expires_at": iso(row.expires_at),
        "waited_seconds": round(waited, 3) if waited is not None else None,
    }


# -- approvals -------------------------------------------------------------------------------


def approvals_page(
    conn: Connection, *, pending: bool, before: str | None = None, limit: int = 50
) -> Json:
    """Pending approvals (oldest first: the longest waiting on top), or decided ones
    (newest decision first)."""
    statement = select(approvals, conversations.c.platform, conversations.c.channel).join(
        conversations, conversations.c.id == approvals.c.conversation_id
    )
    if pending:
        # A question is answered by the person asked, not decided by an operator.
        statement = statement.where(
            approvals.c.status == "pending", approvals.c.kind != "question"
        ).order_by(approvals.c.created_at, approvals.c.id)
    else:
        statement = statement.where(approvals.c.status != "pending")
        if before:
            statement = statement.where(_older(approvals.c.decided_at, approvals.c.id, before))
        statement = statement.order_by(approvals.c.decided_at.desc(), approvals.c.id.desc())
    rows = conn.execute(statement.limit(limit)).all()
    items: list[JsonValue] = [
        {**_approval(row), "platform": row.platform, "channel": row.channel} for row in rows
    ]
    following = None
    if not pending and len(rows) == limit and rows[-1].decided_at is not None:
        following = _cursor(rows[-1].decided_at, rows[-1].id)
    return {"items": items, "next": following}


# -- schedules -------------------------------------------------------------------------------


def schedules_page(
    conn: Connection, *, include_deleted: bool = False, runs: int = 5, limit: int = 200
) -> list[Any]:
    """Every schedule (newest first) with its targets and its latest runs: the rows and
    runs; the caller adds the fire times (they need the recurrence code)."""
    statement = select(schedules, conversations.c.platform, conversations.c.channel).join(
        conversations, conversations.c.id == schedules.c.conversation_id
    )
    if not include_deleted:
        statement = statement.where(schedules.c.status != "deleted")
    rows = conn.execute(statement.order_by(schedules.c.created_at.desc()).limit(limit)).all()
    ids = [row.id for row in rows]
    targets: dict[str, list[str]] = {i: [] for i in ids}
    recent: dict[str, list[JsonValue]] = {i: [] for i in ids}
    if ids:
        for schedule_id, target in conn.execute(
            select(schedule_targets.c.schedule_id, schedule_targets.c.conversation_id).where(
                schedule_targets.c.schedule_id.in_(ids)
            )
        ).all():
            targets[schedule_id].append(target)
        for schedule_id in ids:
            recent[schedule_id] = schedule_runs_of(conn, schedule_id, limit=runs)
    return [(row, targets[row.id], recent[row.id]) for row in rows]


def schedule_runs_of(conn: Connection, schedule_id: str, *, limit: int = 50) -> list[JsonValue]:
    """A schedule's deliveries, newest first: the slot, the job's status, attempts,
    receipt and error, and the turn that ran it."""
    rows = conn.execute(
        select(
            jobs,
            schedule_runs.c.scheduled_for,
            schedule_runs.c.due_at,
            schedule_runs.c.started_at,
            turns.c.quiet,
        )
        .outerjoin(schedule_runs, schedule_runs.c.id == jobs.c.run_id)
        .outerjoin(turns, turns.c.id == jobs.c.turn_id)
        .where(jobs.c.schedule_id == schedule_id)
        .order_by(jobs.c.id.desc())
        .limit(limit)
    ).all()
    shown = [job_sql.run(row) for row in rows]
    return [
        {
            "job_id": int(row.id),
            "turn_id": row.turn_id,
            "conversation_id": row.conversation_id,
            "status": row.status,
            "attempts": int(row.attempts),
            "scheduled_for": iso(row.scheduled_for),
            "created_at": iso(row.created_at),
            "finished_at": iso(row.finished_at),
            "receipt": row.receipt,
            "error": row.error,
            "started_at": iso(row.started_at),
            "lag_seconds": None if run.lag is None else round(run.lag, 3),
            "late": run.late,
            "nothing_to_report": run.nothing_to_report,
        }
        for row, run in zip(rows, shown, strict=True)
    ]

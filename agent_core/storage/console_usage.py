"""What the operator console reads about people, spend and health: who is let in and what
each person used, usage per person, conversation, platform, model or day, today's spend
against the budgets, and what the journal says about the last hour."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pydantic import JsonValue
from sqlalchemy import case, distinct, func, select
from sqlalchemy.engine import Connection

from agent_core.storage.console import Json, iso
from agent_core.storage.schema import (
    access_events,
    approvals,
    conversations,
    dead_letters,
    jobs,
    model_usage,
    paired_users,
    pairing_requests,
    turn_steps,
    turns,
)

# -- people ----------------------------------------------------------------------------------

_TOKENS = func.sum(model_usage.c.prompt_tokens + model_usage.c.completion_tokens)


def people(conn: Connection, *, now: datetime) -> Json:
    """Who is let in (paired, and who revoked whom), pending pairing codes, and everyone's
    usage: turns, tokens and dollars, all time and this month."""
    paired: list[JsonValue] = [
        {
            "user": row.user_id,
            "approved_by": row.approved_by,
            "approved_at": iso(row.approved_at),
            "revoked_by": row.revoked_by,
            "revoked_at": iso(row.revoked_at),
        }
        for row in conn.execute(select(paired_users).order_by(paired_users.c.approved_at.desc()))
    ]
    pending: list[JsonValue] = [
        {
            "code": row.code,
            "user": row.user_id,
            "platform": row.platform,
            "conversation_id": row.conversation_id,
            "created_at": iso(row.created_at),
            "expires_at": iso(row.expires_at),
        }
        for row in conn.execute(
            select(pairing_requests)
            .where(pairing_requests.c.status == "pending", pairing_requests.c.expires_at > now)
            .order_by(pairing_requests.c.created_at)
        )
    ]
    month = now.strftime("%Y-%m")
    used: dict[str, JsonValue] = {
        row.user_id: {
            "tokens": int(row.tokens),
            "cost_usd": float(row.cost),
            "month_cost_usd": float(row.month_cost),
            "turns": int(row.turns),
        }
        for row in conn.execute(
            select(
                model_usage.c.user_id,
                _TOKENS.label("tokens"),
                func.sum(model_usage.c.cost_usd).label("cost"),
                func.sum(
                    case((model_usage.c.day.startswith(month), model_usage.c.cost_usd), else_=0.0)
                ).label("month_cost"),
                func.count(distinct(model_usage.c.turn_id)).label("turns"),
            ).group_by(model_usage.c.user_id)
        )
    }
    changes: list[JsonValue] = [
        {
            "at": iso(row.at),
            "actor": row.actor,
            "action": row.action,
            "user": row.user_id,
            "code": row.code,
        }
        for row in conn.execute(select(access_events).order_by(access_events.c.id.desc()).limit(50))
    ]
    return {"paired": paired, "pending": pending, "usage": used, "changes": changes}


# -- usage -----------------------------------------------------------------------------------

_BY = {
    "user": model_usage.c.user_id,
    "conversation": model_usage.c.conversation_id,
    "platform": conversations.c.platform,
    "model": model_usage.c.model,
    "day": model_usage.c.day,
}


def usage(conn: Connection, *, by: str, since: str, limit: int = 100) -> list[JsonValue]:
    """Tokens, dollars, model calls, turns and tool calls per ``by`` (user, conversation,
    platform, model or day) since the UTC day ``since`` (``YYYY-MM-DD``), largest spend
    first (by day: in date order)."""
    key = _BY[by].label("key")
    statement = (
        select(
            key,
            func.sum(model_usage.c.prompt_tokens).label("prompt_tokens"),
            func.sum(model_usage.c.completion_tokens).label("completion_tokens"),
            func.sum(model_usage.c.cost_usd).label("cost"),
            func.count().label("calls"),
            func.count(distinct(model_usage.c.turn_id)).label("turns"),
        )
        .select_from(model_usage)
        .outerjoin(conversations, conversations.c.id == model_usage.c.conversation_id)
        .where(model_usage.c.day >= since)
        .group_by(key)
    )
    # By day: the newest ``limit`` days, shown oldest first.
    ordered = key.desc() if by == "day" else func.sum(model_usage.c.cost_usd).desc()
    rows = list(conn.execute(statement.order_by(ordered).limit(limit)).all())
    if by == "day":
        rows.reverse()
    tools = _tool_calls(conn, by=by, since=since, keys=[row.key for row in rows])
    return [
        {
            "key": row.key,
            "prompt_tokens": int(row.prompt_tokens or 0),
            "completion_tokens": int(row.completion_tokens or 0),
            "tokens": int((row.prompt_tokens or 0) + (row.completion_tokens or 0)),
            "cost_usd": round(float(row.cost or 0.0), 6),
            "model_calls": int(row.calls),
            "turns": int(row.turns),
            "tool_calls": tools.get(row.key, 0),
        }
        for row in rows
    ]


def _step_day(conn: Connection) -> Any:
    """A tool step's UTC day as ``YYYY-MM-DD`` (SQLite keeps UTC text; PostgreSQL a
    timestamptz)."""
    if conn.dialect.name == "sqlite":
        return func.substr(turn_steps.c.started_at, 1, 10)
    return func.to_char(func.timezone("UTC", turn_steps.c.started_at), "YYYY-MM-DD")


def _tool_calls(conn: Connection, *, by: str, since: str, keys: list[Any]) -> dict[Any, int]:
    if not keys or by == "model":
        return {}
    day = _step_day(conn)
    column = {
        "user": turns.c.user_id,
        "conversation": turns.c.conversation_id,
        "platform": conversations.c.platform,
        "day": day,
    }[by]
    rows = conn.execute(
        select(column.label("key"), func.count())
        .select_from(turn_steps)
        .join(turns, turns.c.id == turn_steps.c.turn_id)
        .join(conversations, conversations.c.id == turns.c.conversation_id)
        .where(turn_steps.c.kind == "tool_call", day >= since, column.in_(keys))
        .group_by(column)
    ).all()
    return {row[0]: int(row[1]) for row in rows}


def spend_today(conn: Connection, *, day: str) -> Json:
    """Today's spend per person and in all, and the conversations' totals (what budgets
    compare with their limits)."""
    per_user = {
        str(row.user_id): {"tokens": int(row.tokens or 0), "cost_usd": float(row.cost or 0.0)}
        for row in conn.execute(
            select(
                model_usage.c.user_id,
                _TOKENS.label("tokens"),
                func.sum(model_usage.c.cost_usd).label("cost"),
            )
            .where(model_usage.c.day == day)
            .group_by(model_usage.c.user_id)
        )
    }
    everyone = conn.execute(
        select(func.coalesce(func.sum(model_usage.c.cost_usd), 0.0)).where(model_usage.c.day == day)
    ).scalar_one()
    per_conversation = [
        {"conversation_id": row.conversation_id, "tokens": int(row.tokens), "cost_usd": row.cost}
        for row in conn.execute(
            select(
                model_usage.c.conversation_id,
                _TOKENS.label("tokens"),
                func.sum(model_usage.c.cost_usd).label("cost"),
            )
            .where(model_usage.c.conversation_id.is_not(None))
            .group_by(model_usage.c.conversation_id)
            .order_by(_TOKENS.desc())
            .limit(20)
        )
    ]
    return {
        "per_user": per_user,  # type: ignore[dict-item]
        "day_cost_usd": float(everyone),
        "conversations": per_conversation,  # type: ignore[dict-item]
    }


def totals(conn: Connection) -> Json:
    """Every model call's tokens and dollars summed (erasure must leave these alone)."""
    row = conn.execute(
        select(
            func.count(),
            func.coalesce(func.sum(model_usage.c.prompt_tokens), 0),
            func.coalesce(func.sum(model_usage.c.completion_tokens), 0),
            func.coalesce(func.sum(model_usage.c.cost_usd), 0.0),
        )
    ).one()
    return {
        "model_calls": int(row[0]),
        "prompt_tokens": int(row[1]),
        "completion_tokens": int(row[2]),
        "cost_usd": float(row[3]),
    }


# -- health ----------------------------------------------------------------------------------


def health(conn: Connection, *, now: datetime) -> Json:
    """What the journal says about the last hour: failed turns and jobs, dead letters,
    turns that needed more than one attempt (recovered after a crash or a takeover), recovery
    prompts, and the oldest turn still open."""
    hour = now - timedelta(hours=1)
    failed_turns = conn.execute(
        select(func.count()).where(turns.c.status == "failed", turns.c.finished_at >= hour)
    ).scalar_one()
    failed_jobs = conn.execute(
        select(func.count()).where(jobs.c.status == "failed", jobs.c.finished_at >= hour)
    ).scalar_one()
    dead = conn.execute(select(func.count()).where(dead_letters.c.created_at >= hour)).scalar_one()
    resumed = conn.execute(
        select(func.count()).where(turns.c.attempts > 1, turns.c.created_at >= hour)
    ).scalar_one()
    recoveries = conn.execute(
        select(func.count()).where(approvals.c.kind == "recovery", approvals.c.created_at >= hour)
    ).scalar_one()
    oldest_open = conn.execute(
        select(func.min(turns.c.created_at)).where(turns.c.status.in_(("pending", "running")))
    ).scalar()
    recent_errors = [
        {"turn_id": int(row.id), "error": row.error, "at": iso(row.finished_at)}
        for row in conn.execute(
            select(turns.c.id, turns.c.error, turns.c.finished_at)
            .where(turns.c.status == "failed", turns.c.finished_at >= hour)
            .order_by(turns.c.id.desc())
            .limit(10)
        )
    ]
    return {
        "failed_turns_last_hour": int(failed_turns),
        "failed_jobs_last_hour": int(failed_jobs),
        "dead_letters_last_hour": int(dead),
        "resumed_turns_last_hour": int(resumed),
        "recovery_prompts_last_hour": int(recoveries),
        "oldest_open_turn_seconds": (
            round((now - oldest_open).total_seconds(), 1) if oldest_open is not None else None
        ),
        "recent_errors": recent_errors,  # type: ignore[dict-item]
    }


def platforms(conn: Connection) -> list[str]:
    """The platforms the database has conversations of."""
    return sorted(conn.execute(select(conversations.c.platform).distinct()).scalars())

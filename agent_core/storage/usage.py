"""Model spend: one row per model call, written in the transaction that journals the call's
outcome, and the sums the budgets and the ``usage`` command read."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Float, Integer, String, bindparam, func, insert, select
from sqlalchemy.engine import Connection

from agent_core.budgets import Spent
from agent_core.journaled import Spend
from agent_core.storage.columns import UTCDateTime
from agent_core.storage.schema import model_usage, turns

_RECORD = insert(model_usage).from_select(
    ["day", "user_id", "conversation_id", "turn_id", "model", "prompt_tokens",
     "completion_tokens", "cost_usd", "created_at"],
    select(
        bindparam("b_day", type_=String), turns.c.user_id, turns.c.conversation_id, turns.c.id,
        bindparam("b_model", type_=String), bindparam("b_prompt", type_=Integer),
        bindparam("b_completion", type_=Integer), bindparam("b_cost", type_=Float),
        bindparam("b_now", type_=UTCDateTime()),
    ).where(turns.c.id == bindparam("b_turn")),
)  # fmt: skip
_TOKENS = func.coalesce(func.sum(model_usage.c.prompt_tokens + model_usage.c.completion_tokens), 0)
_COST = func.coalesce(func.sum(model_usage.c.cost_usd), 0.0)


def day_of(moment: datetime) -> str:
    """The UTC day a spend counts for (budgets start again at 00:00 UTC)."""
    return moment.strftime("%Y-%m-%d")


def record(conn: Connection, turn_id: int, spend: Spend, *, now: datetime) -> None:
    """Count a finished model call's tokens and cost (nothing when it reported none)."""
    if not spend.any:
        return
    conn.execute(
        _RECORD,
        {
            "b_day": day_of(now),
            "b_model": spend.model or "",
            "b_prompt": spend.prompt_tokens or 0,
            "b_completion": spend.completion_tokens or 0,
            "b_cost": spend.cost_usd or 0.0,
            "b_now": now,
            "b_turn": turn_id,
        },
    )


def spent(
    conn: Connection, *, turn_id: int, conversation_id: str, user: str, now: datetime
) -> Spent:
    """Every figure the budgets compare with their limits, in one read."""
    day = day_of(now)
    turn = conn.execute(select(_TOKENS).where(model_usage.c.turn_id == turn_id)).scalar_one()
    conversation = conn.execute(
        select(_TOKENS, _COST).where(model_usage.c.conversation_id == conversation_id)
    ).one()
    mine = conn.execute(
        select(_TOKENS, _COST).where(model_usage.c.user_id == user, model_usage.c.day == day)
    ).one()
    everyone = conn.execute(select(_COST).where(model_usage.c.day == day)).scalar_one()
    return Spent(
        turn_tokens=int(turn),
        conversation_tokens=int(conversation[0]),
        conversation_usd=float(conversation[1]),
        user_day_tokens=int(mine[0]),
        user_day_usd=float(mine[1]),
        day_usd=float(everyone),
    )

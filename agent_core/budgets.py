"""Budgets: tokens and cost counted per turn, per conversation, per user per day and for
everyone per day, against limits from the settings. Pure: the store sums what was spent
(``Spent``), this decides what that means (``judge``).

A limit reached is a hard stop: the turn is answered with a message saying which budget,
how much was used, and when or how it frees up, and no model call is made. Past
``warn_at`` of a limit (80 % by default) the reply carries a short note, so people are not
surprised by the stop.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetLimits:
    """The limits (None = no limit); tokens are prompt plus completion tokens."""

    turn_tokens: int | None = None
    conversation_tokens: int | None = None
    conversation_usd: float | None = None
    user_daily_tokens: int | None = None
    user_daily_usd: float | None = None
    daily_usd: float | None = None
    warn_at: float = 0.8

    @property
    def any(self) -> bool:
        """Is any limit set (else nothing needs counting before a model call)?"""
        return any(
            limit is not None
            for limit in (
                self.turn_tokens,
                self.conversation_tokens,
                self.conversation_usd,
                self.user_daily_tokens,
                self.user_daily_usd,
                self.daily_usd,
            )
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Spent:
    """What was spent so far, as the store sums it."""

    turn_tokens: int = 0
    conversation_tokens: int = 0
    conversation_usd: float = 0.0
    user_day_tokens: int = 0
    user_day_usd: float = 0.0
    day_usd: float = 0.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """``stop``: the message to answer with instead of calling the model; ``warning``: a
    note for the reply."""

    stop: str | None = None
    warning: str | None = None


@dataclass(frozen=True, slots=True)
class _Line:
    what: str  # "your daily tokens"
    used: float
    limit: float | None
    unit: str  # "tokens" or "USD"
    setting: str
    frees: str  # when or how it frees up


def _lines(limits: BudgetLimits, spent: Spent) -> list[_Line]:
    tomorrow = "it starts again at 00:00 UTC"
    return [
        _Line("this turn", spent.turn_tokens, limits.turn_tokens, "tokens",
              "CHATGATE_BUDGET_TURN_TOKENS", "ask for less at once"),
        _Line("this conversation", spent.conversation_tokens, limits.conversation_tokens,
              "tokens", "CHATGATE_BUDGET_CONVERSATION_TOKENS", "it does not reset"),
        _Line("this conversation", spent.conversation_usd, limits.conversation_usd, "USD",
              "CHATGATE_BUDGET_CONVERSATION_USD", "it does not reset"),
        _Line("your daily", spent.user_day_tokens, limits.user_daily_tokens, "tokens",
              "CHATGATE_BUDGET_USER_DAILY_TOKENS", tomorrow),
        _Line("your daily", spent.user_day_usd, limits.user_daily_usd, "USD",
              "CHATGATE_BUDGET_USER_DAILY_USD", tomorrow),
        _Line("today's shared", spent.day_usd, limits.daily_usd, "USD",
              "CHATGATE_BUDGET_DAILY_USD", tomorrow),
    ]  # fmt: skip


def _amount(value: float, unit: str) -> str:
    return f"${value:,.2f}" if unit == "USD" else f"{int(value):,} tokens"


def judge(limits: BudgetLimits, spent: Spent) -> Verdict:
    """Stop at the first limit reached; otherwise warn about the fullest one past
    ``warn_at``."""
    fullest: tuple[float, _Line] | None = None
    for line in _lines(limits, spent):
        if line.limit is None:
            continue
        share = line.used / line.limit if line.limit > 0 else 1.0
        if share >= 1.0:
            return Verdict(
                stop=(
                    f"Budget reached: {line.what} budget is {_amount(line.limit, line.unit)} and "
                    f"{_amount(line.used, line.unit)} are used, so I will not call the model "
                    f"now ({line.frees}; an admin can raise {line.setting})."
                )
            )
        if share >= limits.warn_at and (fullest is None or share > fullest[0]):
            fullest = (share, line)
    if fullest is None:
        return Verdict()
    share, line = fullest
    return Verdict(
        warning=(
            f"Note: {share:.0%} of {line.what} budget ({_amount(line.limit or 0, line.unit)}) "
            "is used."
        )
    )

"""The budget rules: stop at a limit with a message that says which and how to go on, a
note past the warning share, nothing without limits."""

from __future__ import annotations

from agent_core.budgets import BudgetLimits, Spent, judge


def test_no_limits_no_verdict() -> None:
    assert not BudgetLimits().any
    verdict = judge(BudgetLimits(), Spent(user_day_tokens=10**9, day_usd=10**6))
    assert (verdict.stop, verdict.warning) == (None, None)


def test_the_first_limit_reached_stops_with_what_and_how() -> None:
    limits = BudgetLimits(user_daily_tokens=1000, daily_usd=5.0)
    verdict = judge(limits, Spent(user_day_tokens=1000, day_usd=1.0))
    assert verdict.stop is not None
    assert "your daily budget is 1,000 tokens and 1,000 tokens are used" in verdict.stop
    assert "00:00 UTC" in verdict.stop
    assert "CHATGATE_BUDGET_USER_DAILY_TOKENS" in verdict.stop
    shared = judge(limits, Spent(user_day_tokens=10, day_usd=5.01))
    assert shared.stop is not None
    assert "today's shared budget is $5.00" in shared.stop


def test_past_the_warning_share_the_fullest_budget_is_named() -> None:
    limits = BudgetLimits(conversation_tokens=1000, user_daily_usd=1.0)
    verdict = judge(limits, Spent(conversation_tokens=850, user_day_usd=0.95))
    assert verdict.stop is None
    assert verdict.warning == "Note: 95% of your daily budget ($1.00) is used."
    assert judge(limits, Spent(conversation_tokens=790)).warning is None
    assert judge(BudgetLimits(turn_tokens=100, warn_at=0.5), Spent(turn_tokens=50)).warning

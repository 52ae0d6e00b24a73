"""The budgets, applied to replay and eval model calls: each call is counted against the
person running it (``replay:NAME``, ``eval:NAME``) and the day, as a turn's calls are; the
per-turn token limit holds per replayed turn, and ``--max-cost`` caps the run itself."""

from __future__ import annotations

from typing import Protocol

from agent_core.budgets import BudgetLimits, Spent, judge
from agent_core.journaled import Spend


class SpendStore(Protocol):
    """Where replay and eval spend is counted."""

    async def record_replay_spend(self, actor: str, spend: Spend) -> None:
        """Count one model call of ``actor``."""
        ...

    async def replay_spending(self, actor: str) -> Spent:
        """What ``actor`` and everyone spent today."""
        ...


class RunBudget:
    """The budgets for one replay or eval run."""

    def __init__(
        self,
        store: SpendStore | None,
        *,
        actor: str,
        limits: BudgetLimits,
        max_cost: float | None = None,
    ) -> None:
        self._store = store
        self._actor = actor
        # Conversations are not run again: only the limits that apply to a call as such.
        self._limits = BudgetLimits(
            turn_tokens=limits.turn_tokens,
            user_daily_tokens=limits.user_daily_tokens,
            user_daily_usd=limits.user_daily_usd,
            daily_usd=limits.daily_usd,
        )
        self._max_cost = max_cost
        self.cost_usd = 0.0
        self.calls = 0

    async def may_spend(self, turn_tokens: int) -> str | None:
        """Why the next call may not be made (a budget reached), or None."""
        if self._max_cost is not None and self.cost_usd >= self._max_cost:
            return f"Budget reached: this run's --max-cost of ${self._max_cost:.4f} is spent."
        if not self._limits.any:
            return None
        spent = Spent()
        if self._store is not None:
            spent = await self._store.replay_spending(self._actor)
        spent = Spent(
            turn_tokens=turn_tokens,
            user_day_tokens=spent.user_day_tokens,
            user_day_usd=spent.user_day_usd,
            day_usd=spent.day_usd,
        )
        return judge(self._limits, spent).stop

    async def spent(self, spend: Spend) -> None:
        """Count a call that was made."""
        self.calls += 1
        self.cost_usd += spend.cost_usd or 0.0
        if self._store is not None:
            await self._store.record_replay_spend(self._actor, spend)

"""What the agent remembers, and what conversations have spent."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agent_core.budgets import Spent
from agent_core.journaled import Spend
from agent_core.records import (
    MemoryRecord,
    MemoryScope,
    Usage,
)


class MemoryStore(Protocol):
    """What the agent remembers about people and conversations, and its upkeep."""

    async def remember(
        self,
        *,
        user: str,
        conversation_id: str,
        scope: MemoryScope,
        fact: str,
        about: str | None,
        source: str,
        turn_id: int | None = None,
    ) -> tuple[int, int]:
        """Store a fact (superseding the person's older fact about the same thing);
        return its id and how many facts it superseded. (Drawn from turn ``turn_id``
        after its message was deleted: stored forgotten.)"""
        ...

    async def recall(
        self, *, user: str, conversation_id: str, query: str, limit: int = 8
    ) -> list[MemoryRecord]:
        """The live facts matching ``query`` that this person may see here, best first."""
        ...

    async def forget(
        self, *, user: str, conversation_id: str, memory_id: int, admin: bool = False
    ) -> bool:
        """Forget a fact this person may forget (see ``memory.forget``); False when there is
        none by that id."""
        ...

    async def finish_extraction(
        self,
        job_id: int,
        *,
        owner: str,
        turn_id: int,
        facts: Sequence[tuple[str, str | None]],
        spend: Spend,
    ) -> int | None:
        """Close an extract job with its facts and spend, if it is still ours (else None)."""
        ...

    async def unreviewed_facts(
        self, user: str, *, after: int = 0, limit: int
    ) -> list[MemoryRecord]:
        """A person's live facts maintenance has not looked at, oldest first, after an id."""
        ...

    async def similar_older_facts(
        self, user: str, newer: MemoryRecord, *, limit: int
    ) -> list[MemoryRecord]:
        """The person's live facts older than ``newer`` sharing words with it."""
        ...

    async def review_fact(
        self, user: str, fact: MemoryRecord, *, obsolete: Sequence[int] | None, spend: Spend | None
    ) -> int:
        """Let ``fact`` supersede the ``obsolete`` older facts and mark it reviewed (None:
        leave it for the next review), and count the model call's spend, in one
        transaction; returns how many it superseded."""
        ...


class UsageStore(Protocol):
    """What conversations and people have spent."""

    async def spending(self, conversation_id: str, user: str, *, turn_id: int = 0) -> Spent:
        """What a turn (when given), its conversation, its user today and everyone today
        spent."""
        ...

    async def usage(self, conversation_id: str) -> Usage:
        """Turns, model calls and tokens spent in this conversation so far."""
        ...

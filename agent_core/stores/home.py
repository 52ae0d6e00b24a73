"""A person's own page (Slack's App Home): what the core asks of the storage to show one
person their schedules in every conversation, the approvals waiting, and their spend."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from agent_core.events import ConversationKey, Platform
from agent_core.records import ApprovalRecord, ScheduleRecord


@dataclass(frozen=True, slots=True, kw_only=True)
class PersonUsage:
    """A person's model use since ``since`` (the start of the month, UTC)."""

    since: datetime
    turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        """Prompt and completion tokens together."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class OwnSchedule:
    """A schedule a person created, with the conversation it was created in."""

    schedule: ScheduleRecord
    conversation: ConversationKey


class HomeStore(Protocol):
    """One person's things across conversations."""

    async def schedules_by(self, user: str, *, platform: Platform, limit: int) -> list[OwnSchedule]:
        """The schedules ``user`` created in any conversation on ``platform`` that are not
        deleted, oldest first."""
        ...

    async def pending_approvals(self, *, now: datetime, limit: int) -> list[ApprovalRecord]:
        """Approvals nobody has decided that have not expired, newest first (the caller
        asks :meth:`agent_core.approvals.Approvals.refusal` which a person may decide)."""
        ...

    async def usage_by(self, user: str, *, since: datetime) -> PersonUsage:
        """``user``'s turns, tokens and cost since ``since`` (every conversation)."""
        ...

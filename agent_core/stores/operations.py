"""The operator's side of the storage: the console's reads, the audit log, a person's export
and erasure, retention, and the schedule changes only an operator makes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from pydantic import JsonValue

from agent_core.records import PairingRequest

Json = dict[str, JsonValue]


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One row of the log."""

    id: int
    at: datetime
    actor: str
    action: str
    subject: str | None
    conversation_id: str | None
    turn_id: int | None
    detail: JsonValue

    def to_json(self) -> dict[str, JsonValue]:
        """The entry as the console and the JSON Lines export write it."""
        return {
            "id": self.id,
            "at": self.at.isoformat(),
            "actor": self.actor,
            "action": self.action,
            "subject": self.subject,
            "conversation_id": self.conversation_id,
            "turn_id": self.turn_id,
            "detail": self.detail,
        }


class OperatorStore(Protocol):
    """What the console, ``chatgate forget`` and the retention pass ask of the database."""

    async def conversations(self, **query: Any) -> Json:
        """A page of conversations: ``query``, ``platform``, ``before`` (cursor), ``limit``."""
        ...

    async def conversation_messages(
        self, conversation_id: str, *, before: int | None, limit: int
    ) -> list[JsonValue]:
        """A page of one conversation's messages, newest first."""
        ...

    async def turns(self, **query: Any) -> Json:
        """A page of turns: ``conversation_id``, ``user``, ``status``, ``before``, ``limit``."""
        ...

    async def timeline(self, turn_id: int) -> Json | None:
        """One turn's journal, approvals and receipts; None when there is no such turn."""
        ...

    async def approvals(self, *, pending: bool, before: str | None, limit: int) -> Json:
        """Pending (oldest first) or decided (newest first) approvals."""
        ...

    async def schedules(self, *, include_deleted: bool = False) -> list[Any]:
        """Every schedule row with its targets and latest runs."""
        ...

    async def schedule_runs(self, schedule_id: str, *, limit: int = 50) -> list[JsonValue]:
        """One schedule's deliveries, newest first."""
        ...

    async def people(self) -> Json:
        """Paired users, pending codes, access changes and usage per person."""
        ...

    async def usage(self, *, by: str, since: str) -> list[JsonValue]:
        """Spend per user, conversation, platform, model or day since a UTC day."""
        ...

    async def spend_today(self) -> Json:
        """Today's spend per person and in all; the conversations' totals."""
        ...

    async def totals(self) -> Json:
        """Every model call's tokens and dollars summed."""
        ...

    async def feedback(self, *, rating: str | None, before: int | None, limit: int) -> Json:
        """A page of rated turns, the newest rating first: ``rating`` up or down only,
        ``before`` a rating id."""
        ...

    async def feedback_totals(self, *, since: datetime) -> dict[str, int]:
        """👍 and 👎 given or changed since ``since``."""
        ...

    async def platforms(self) -> list[str]:
        """The platforms the database has conversations of."""
        ...

    async def health(self) -> Json:
        """Failures, recoveries and the oldest open turn, from the journal."""
        ...

    async def audit(
        self,
        *,
        query: str | None = None,
        actor: str | None = None,
        action: str | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[AuditEntry]:
        """A page of the audit log, newest first."""
        ...

    async def audit_chunk(self, *, query: str | None, after: int) -> list[AuditEntry]:
        """The export's next entries after the id ``after``, oldest first."""
        ...

    async def record(self, *, actor: str, action: str, **fields: Any) -> None:
        """Append an audit entry."""
        ...

    async def prune_audit(self, *, before: datetime) -> int:
        """Remove audit entries older than ``before``; how many."""
        ...

    async def refuse_pairing(self, code: str, *, actor: str) -> PairingRequest:
        """Turn a pending pairing code down (``PairingRefused`` when it is not pending)."""
        ...

    async def export_person(self, user: str) -> Json:
        """Everything held about ``user``."""
        ...

    async def forget_person(
        self,
        user: str,
        *,
        actor: str,
        settle: float = 30.0,
        stop_here: Callable[[int], object] | None = None,
    ) -> tuple[Json, Json]:
        """Erase ``user``'s data: the receipt, and the files to remove (``blobs``,
        ``uploads``, ``conversations``: see ``agent_core.files.erasure``). A running turn
        of theirs is stopped (``stop_here`` for this process's) and what it wrote erased."""
        ...

    async def expire_old(self, *, days: float, actor: str = "chatgate:retention") -> Json:
        """Remove the content of what is older than ``days``; what went."""
        ...

    async def edit_schedule(
        self,
        schedule_id: str,
        *,
        prompt: str | None,
        recurrence: tuple[str, str, str, datetime | None] | None,
        next_run_at: datetime | None,
        actor: str,
    ) -> bool:
        """Change a live schedule's prompt and/or timetable; False when it is not live."""
        ...

    async def run_schedule_now(self, schedule_id: str, *, actor: str) -> list[int]:
        """Queue one run now; the jobs to hand to the queue."""
        ...

"""Schedules: the transactions behind ``Store``'s schedule methods (``agent_core.storage.
schedules`` holds them), one façade with :class:`~agent_core.storage.store.Store`, which
inherits :class:`ScheduleRows`."""

from __future__ import annotations

from datetime import datetime, timedelta

from agent_core.events import utcnow
from agent_core.records import (
    LagReport,
    NewSchedule,
    Planner,
    ScheduleRecord,
    ScheduleStatus,
    StartedRun,
)
from agent_core.storage import lag as lag_sql
from agent_core.storage import schedules as schedule_sql
from agent_core.storage.database import Database


class ScheduleRows:
    """Schedules and the dispatcher's claim, over :attr:`database`."""

    database: Database

    async def create_schedule(self, new: NewSchedule) -> tuple[ScheduleRecord, bool]:
        """Store a schedule (False: the same creation key made it before)."""
        return await self.database.write(schedule_sql.create, new)

    async def schedule(self, schedule_id: str) -> ScheduleRecord | None:
        """One schedule by id."""
        return await self.database.read(schedule_sql.load_schedule, schedule_id)

    async def schedules_for(self, conversation_id: str, *, runs: int = 0) -> list[ScheduleRecord]:
        """This conversation's schedules (created here or delivering here), each with its
        latest ``runs`` deliveries to this conversation."""
        return await self.database.read(schedule_sql.with_runs, conversation_id, runs=runs)

    async def set_schedule_status(
        self,
        schedule_id: str,
        *,
        status: ScheduleStatus,
        allowed_from: tuple[ScheduleStatus, ...],
        next_run_at: datetime | None = None,
        actor: str | None = None,
    ) -> ScheduleRecord | None:
        """Pause, resume or delete (compare-and-set); None when the status did not allow it.
        ``actor``: who did it, for the audit log."""
        return await self.database.write(
            schedule_sql.set_status,
            schedule_id,
            status=status,
            allowed_from=allowed_from,
            next_run_at=next_run_at,
            actor=actor,
        )

    async def dispatch_due(
        self, *, now: datetime, plan: Planner, limit: int = 500
    ) -> tuple[int, list[int]]:
        """Fire due schedule slots: (schedules claimed, new job ids)."""
        return await self.database.write(schedule_sql.dispatch_due, now=now, plan=plan, limit=limit)

    async def next_due(self, *, jobs: bool) -> datetime | None:
        """The earliest moment a schedule slot (or, with ``jobs``, an unsent queued job)
        becomes due."""
        return await self.database.read(lag_sql.next_due, jobs=jobs)

    async def runs_started_since(self, after: datetime) -> list[StartedRun]:
        """Schedule runs started after ``after``, oldest first, with their lags."""
        return await self.database.read(lag_sql.started_since, after)

    async def lag_report(self, window: timedelta) -> LagReport:
        """How runs started over the last ``window`` and who is alive (``doctor``)."""
        return await self.database.read(lag_sql.report, now=utcnow(), window=window)

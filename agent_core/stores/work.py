"""Work beside the conversations: schedules, the jobs they and ``bg`` queue, and the
leases and locks processes hold."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Protocol

from agent_core.records import (
    JobOutcome,
    JobRecord,
    LagReport,
    NewSchedule,
    Planner,
    ScheduleRecord,
    ScheduleStatus,
    StartedRun,
    TurnStatus,
)


class ScheduleStore(Protocol):
    """Schedules and the conversations they deliver to; due slots fired into jobs."""

    async def create_schedule(self, new: NewSchedule) -> tuple[ScheduleRecord, bool]:
        """Store a schedule (False: the same creation key made it before)."""
        ...

    async def schedule(self, schedule_id: str) -> ScheduleRecord | None:
        """One schedule by id."""
        ...

    async def schedules_for(self, conversation_id: str, *, runs: int = 0) -> list[ScheduleRecord]:
        """This conversation's schedules (created here or delivering here), each with its
        latest ``runs`` deliveries to this conversation."""
        ...

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
        ...

    async def conversation_scope(self, conversation_id: str) -> list[str]:
        """This conversation, and its channel's threads when it is a channel's own."""
        ...

    async def find_conversation(self, platform: str, channel: str) -> str | None:
        """The id of a channel's own conversation (not one of its threads), if we know it."""
        ...

    async def dispatch_due(
        self, *, now: datetime, plan: Planner, limit: int = 500
    ) -> tuple[int, list[int]]:
        """Fire due schedule slots: (schedules claimed, new job ids)."""
        ...

    async def next_due(self, *, jobs: bool) -> datetime | None:
        """The earliest moment a schedule slot (or, with ``jobs``, an unsent queued job)
        becomes due."""
        ...

    async def runs_started_since(self, after: datetime) -> list[StartedRun]:
        """Schedule runs started after ``after``, oldest first, with their lags."""
        ...

    async def lag_report(self, window: timedelta) -> LagReport:
        """How runs started over the last ``window`` and who is alive (``doctor``)."""
        ...

    async def plan_maintenance(self, *, slot: datetime) -> list[int]:
        """Claim a maintenance slot and queue its per-person jobs (empty: not ours)."""
        ...


class JobStore(Protocol):
    """Queued work: claimed, renewed, retried, finished, and sent to the broker."""

    async def background_turn(
        self, conversation_id: str, *, user: str, prompt: str, reply_to: str | None
    ) -> int:
        """``bg PROMPT``: queue a turn for a worker; returns the job id."""
        ...

    async def refuse_job(self, job_id: int, *, owner: str, error: str, note: str) -> int | None:
        """Close a job without running it (its owner lost access); the note's id, or None
        when the job is no longer ours."""
        ...

    async def claim_job(self, job_id: int | None, *, owner: str, ttl: float) -> JobRecord | None:
        """Take a job's lease (the given one, or the next claimable); None if not free."""
        ...

    async def claim_jobs(self, limit: int, *, owner: str, ttl: float) -> list[JobRecord]:
        """Take the leases of up to ``limit`` claimable jobs at once, oldest due first."""
        ...

    async def beat(self, role: str, *, owner: str) -> None:
        """A dispatcher or an embedded runner is alive (``chatgate doctor`` reads it)."""
        ...

    async def renew_job(self, job_id: int, *, owner: str, ttl: float) -> bool:
        """Extend a job lease this owner holds."""
        ...

    async def retry_job(self, job_id: int, *, owner: str, at: datetime, error: str) -> bool:
        """Back in the queue, due at ``at``."""
        ...

    async def hand_back_job(self, job_id: int, *, owner: str) -> bool:
        """Give a job this process cannot finish back to the queue, due now."""
        ...

    async def job_waiting(self, job_id: int, *, owner: str) -> None:
        """The job's turn waits for an approval."""
        ...

    async def finish_job(
        self,
        job_id: int,
        *,
        owner: str,
        turn_status: TurnStatus,
        error: str | None,
        failure_limit: int,
        pause_note: str,
    ) -> JobOutcome | None:
        """Close the job with its turn's outcome (see ``storage.jobs.finish``)."""
        ...

    async def reminder(self, job_id: int, *, owner: str) -> tuple[int, str, str | None] | None:
        """A ``message`` job's post, stored once: (note id, text, receipt if delivered)."""
        ...

    async def run_times(self, run_id: int) -> tuple[datetime, datetime | None] | None:
        """A schedule run's planned start and its start."""
        ...

    async def job_note(
        self, job_id: int, what: str, text: str, *, owner: str
    ) -> tuple[int, str | None] | None:
        """A job's system note, stored once: (its id, its receipt when delivered)."""
        ...

    async def note_sent(self, note_id: int, *, receipt: str) -> None:
        """Record a delivered note's receipt."""
        ...

    async def jobs_to_send(self, *, now: datetime, resend_after: timedelta) -> list[int]:
        """Jobs the broker should be given (again)."""
        ...

    async def jobs_sent(self, job_ids: list[int], *, now: datetime) -> None:
        """These jobs were handed to the broker."""
        ...

    async def job_depth(self) -> tuple[dict[str, int], float]:
        """Unfinished jobs by status, and the seconds the oldest due job has waited."""
        ...


class LockStore(Protocol):
    """Named locks one process holds at a time."""

    async def take_lock(self, name: str, *, owner: str, ttl: float) -> bool:
        """Take the named lock for ``ttl`` seconds, if it is free (or already ours)."""
        ...

    async def renew_lock(self, name: str, *, owner: str, ttl: float) -> bool:
        """Extend our hold on the lock; False when it is no longer ours."""
        ...

    async def release_lock(self, name: str, *, owner: str) -> None:
        """Give the lock up (a no-op when it is not ours)."""
        ...

    async def lease_holders(self) -> list[str]:
        """Who holds a lease that has not expired: a conversation's, a job's or a lock."""
        ...

    async def expire_leases(self, owners: Collection[str]) -> int:
        """End every lease ``owners`` hold now, as if it had expired; how many."""
        ...

    async def heard_until(self, platform: str) -> datetime | None:
        """Until when ``platform``'s receiving session was last known to hear (None when
        none ever did)."""
        ...

    async def hear_until(self, platform: str, at: datetime) -> None:
        """``platform``'s receiving session heard everything sent before ``at``."""
        ...

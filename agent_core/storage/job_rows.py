"""Queued work: the transactions behind ``Store``'s job methods (``agent_core.storage.jobs``
holds them), one façade with :class:`~agent_core.storage.store.Store`, which inherits
:class:`JobRows`."""

from __future__ import annotations

from datetime import datetime, timedelta

from agent_core.events import utcnow
from agent_core.records import FinishedStep, JobOutcome, JobRecord, TurnRecord, TurnStatus
from agent_core.storage import jobs as job_sql
from agent_core.storage import lag as lag_sql
from agent_core.storage import upkeep
from agent_core.storage.database import Database


class JobRows:
    """Queued turns and upkeep jobs: claims, leases, outcomes, over :attr:`database`."""

    database: Database

    async def background_turn(
        self, conversation_id: str, *, user: str, prompt: str, reply_to: str | None
    ) -> int:
        """``bg PROMPT``: queue a turn for a worker; returns the job id."""
        return await self.database.write(
            job_sql.background, conversation_id, user=user, prompt=prompt, reply_to=reply_to
        )

    async def claim_job(self, job_id: int | None, *, owner: str, ttl: float) -> JobRecord | None:
        """Take a job's lease (the given one, or the next claimable); None if not free."""
        return await self.database.write(job_sql.claim, job_id, owner=owner, ttl=ttl)

    async def claim_jobs(self, limit: int, *, owner: str, ttl: float) -> list[JobRecord]:
        """Take the leases of up to ``limit`` claimable jobs at once, oldest due first."""
        return await self.database.write(job_sql.claim_many, owner=owner, ttl=ttl, limit=limit)

    async def beat(self, role: str, *, owner: str) -> None:
        """A dispatcher or an embedded runner is alive (``chatgate doctor`` reads it)."""
        await self.database.write(lag_sql.beat, role, owner=owner, now=utcnow())

    async def renew_job(self, job_id: int, *, owner: str, ttl: float) -> bool:
        """Extend a job lease this owner holds."""
        return await self.database.write(job_sql.renew, job_id, owner=owner, ttl=ttl)

    async def retry_job(self, job_id: int, *, owner: str, at: datetime, error: str) -> bool:
        """Back in the queue, due at ``at``."""
        return await self.database.write(job_sql.retry, job_id, owner=owner, at=at, error=error)

    async def hand_back_job(self, job_id: int, *, owner: str) -> bool:
        """Give a job this process cannot finish back to the queue, due now."""
        return await self.database.write(job_sql.hand_back, job_id, owner=owner)

    async def job_waiting(self, job_id: int, *, owner: str) -> None:
        """The job's turn waits for an approval."""
        await self.database.write(job_sql.wait, job_id, owner=owner)

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
        return await self.database.write(
            job_sql.finish,
            job_id,
            owner=owner,
            turn_status=turn_status,
            error=error,
            failure_limit=failure_limit,
            pause_note=pause_note,
        )

    async def reminder(self, job_id: int, *, owner: str) -> tuple[int, str, str | None] | None:
        """A ``message`` job's post, stored once: (note id, text, receipt if delivered)."""
        return await self.database.write(job_sql.reminder, job_id, owner=owner)

    async def run_times(self, run_id: int) -> tuple[datetime, datetime | None] | None:
        """A schedule run's planned start and its start."""
        return await self.database.read(job_sql.run_times, run_id)

    async def job_note(
        self, job_id: int, what: str, text: str, *, owner: str
    ) -> tuple[int, str | None] | None:
        """A job's system note, stored once: (its id, its receipt when delivered)."""
        return await self.database.write(job_sql.job_note, job_id, what, text, owner=owner)

    async def note_sent(self, note_id: int, *, receipt: str) -> None:
        """Record a delivered note's receipt."""
        await self.database.write(job_sql.note_sent, note_id, receipt=receipt)

    async def jobs_to_send(self, *, now: datetime, resend_after: timedelta) -> list[int]:
        """Jobs the broker should be given (again)."""
        return await self.database.read(job_sql.to_send, now=now, resend_after=resend_after)

    async def jobs_sent(self, job_ids: list[int], *, now: datetime) -> None:
        """These jobs were handed to the broker."""
        await self.database.write(job_sql.mark_sent, job_ids, now=now)

    async def job_depth(self) -> tuple[dict[str, int], float]:
        """Unfinished jobs by status, and the seconds the oldest due job has waited."""
        return await self.database.read(job_sql.depth, now=utcnow())

    async def record_quiet_answer(
        self, turn: TurnRecord, seq: int, *, report: str, answered: FinishedStep | None
    ) -> None:
        """A quiet run's answer that is not worth posting: journaled, the turn done,
        nothing posted (see ``storage.upkeep.quiet_answer``)."""
        await self.database.write(upkeep.quiet_answer, turn, seq, report=report, answered=answered)

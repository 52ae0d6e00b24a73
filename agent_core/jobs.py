"""Queued work: the job-queue port and the code that runs one job, in either profile.

A job runs one queued turn (a schedule run's delivery to one conversation, or ``bg``)
under the job's own lease, beside the conversation's interactive turns rather than in
their queue. The job row decides who runs it (see ``agent_core.storage.jobs``); the
turn's journal decides what is left to do, so a job taken over after a crash repeats no
model call that finished, no tool call that ran, and no reply that was delivered.

Outcomes: the turn finished (done or failed): the job closes with the reply's receipt,
and a schedule that failed ``failure_limit`` times in a row pauses itself and says so in
the conversation; the turn waits for an approval: the job waits, and the decision puts it
back in the queue; the model or the platform failed: the job goes back in the queue with
exponential backoff, and on its last attempt the turn answers with the error instead.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

import structlog

from agent_core.access import MayTalk
from agent_core.delivery import Outbound
from agent_core.errors import LeaseLost
from agent_core.events import ConversationKey, Reply, utcnow
from agent_core.faults import FaultPoints
from agent_core.journaled import lag_note
from agent_core.loop import TurnRunner
from agent_core.memory_upkeep import MemoryUpkeep
from agent_core.records import LATE_AFTER, JobRecord, TurnRecord, TurnStatus
from agent_core.revocation import JOB_REFUSED, NO_ACCESS, deliver_note
from agent_core.stores import JobStore, Journal
from agent_core.triggers import trigger_of
from agent_core.turn_lease import heartbeat

log = structlog.get_logger("chatgate.jobs")

LATE_NOTE = "Schedule {id}: this run was due at {due} UTC ({lag})."
PAUSED_NOTE = (
    "I paused schedule {id} after {failures} failed runs in a row. Fix what it needs and "
    "resume it with /jobs."
)


class JobRunnerStore(JobStore, Journal, Protocol):
    """What this module asks of the storage."""


class JobQueue(Protocol):
    """Where new or re-queued jobs are announced (the rows are already stored)."""

    async def submit(self, job_ids: Sequence[int]) -> None:
        """Make sure these jobs get run: wake the embedded runner, or send them to Celery.

        Losing a submit loses nothing: the dispatcher sends due jobs again."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class JobPolicy:
    """How jobs are leased, retried and given up on."""

    lease_seconds: float = 30.0
    max_attempts: int = 4
    backoff_seconds: float = 10.0
    backoff_max_seconds: float = 600.0
    failure_limit: int = 3
    # A schedule run that starts later than this after its time says so in the chat.
    late_after: timedelta = LATE_AFTER

    def backoff(self, attempts: int) -> timedelta:
        """The wait before attempt ``attempts + 1``: doubling, capped."""
        seconds = self.backoff_seconds * 2 ** max(attempts - 1, 0)
        return timedelta(seconds=min(seconds, self.backoff_max_seconds))


class JobRunner:
    """Runs one job to its end (or to its next wait) under the job's lease."""

    def __init__(
        self,
        store: JobRunnerStore,
        runner: TurnRunner,
        outbound: Outbound,
        *,
        policy: JobPolicy,
        upkeep: MemoryUpkeep | None = None,
        may_talk: MayTalk | None = None,
        faults: FaultPoints | None = None,
    ) -> None:
        self._store = store
        self._faults = faults or FaultPoints()
        self._runner = runner
        self._outbound = outbound
        self.policy = policy
        self._upkeep = upkeep
        # Asked before a queued turn runs: its owner may have lost access since.
        self._may_talk = may_talk
        # Set when the process stops: a job cancelled then is handed back at once.
        self.draining = False
        # Awaited before each model call of a job's turn: lets interactive turns go first.
        self.before_step: Callable[[], Awaitable[None]] | None = None

    async def run(self, job_id: int | None, *, owner: str) -> JobRecord | None:
        """Claim the job (or the next claimable one when ``job_id`` is None) and run it.

        Returns the job that ran here, or None when there was nothing to claim (it is
        done, someone else holds it, or it is not due yet)."""
        job = await self.claim(job_id, owner=owner)
        if job is not None:
            await self.execute(job, owner=owner)
        return job

    async def claim(self, job_id: int | None, *, owner: str) -> JobRecord | None:
        """Take the job's lease (see ``Store.claim_job``)."""
        return await self._store.claim_job(job_id, owner=owner, ttl=self.policy.lease_seconds)

    async def claim_many(self, limit: int, *, owner: str) -> list[JobRecord]:
        """Take the leases of up to ``limit`` due jobs at once (the embedded runner)."""
        return await self._store.claim_jobs(limit, owner=owner, ttl=self.policy.lease_seconds)

    async def alive(self, *, owner: str) -> None:
        """Record that this process's runner is alive (``chatgate doctor`` reads it)."""
        await self._store.beat("runner", owner=owner)

    async def execute(self, job: JobRecord, *, owner: str) -> None:
        """Run a claimed job until its turn ends or waits, renewing the lease meanwhile."""
        with structlog.contextvars.bound_contextvars(
            job_id=job.id, job_kind=job.kind, turn_id=job.turn_id, schedule_id=job.schedule_id
        ):
            log.info("job started", attempt=job.attempts)
            try:
                ttl = self.policy.lease_seconds
                renew = functools.partial(self._store.renew_job, job.id, owner=owner, ttl=ttl)
                async with heartbeat(renew, every=ttl / 3, what=f"job {job.id}"):
                    await self._run(job, owner=owner)
            except LeaseLost:
                log.warning("job lease lost; another worker has it now")
            except asyncio.CancelledError:
                # A drain: hand the job back now rather than when its lease expires. (Any
                # other cancellation, a time limit, leaves it to the lease and the backoff.)
                if self.draining and await asyncio.shield(
                    self._store.hand_back_job(job.id, owner=owner)
                ):
                    log.info("job handed back at shutdown")
                raise

    async def _run(self, job: JobRecord, *, owner: str) -> None:
        if job.kind == "message":
            await self._remind(job, owner=owner)
            return
        if job.kind != "turn":
            await self._run_upkeep(job, owner=owner)
            return
        assert job.turn_id is not None
        turn = await self._store.load_turn(job.turn_id)
        if turn.status not in ("done", "failed"):
            if self._may_talk is not None and not await self._may_talk(
                turn.user, turn.conversation
            ):
                await self._refuse(job, turn, owner=owner)
                return
            await self._say_if_late(job, turn.conversation, owner=owner)
            turn = await self._store.start_turn(job.turn_id)
            last = job.attempts >= self.policy.max_attempts
            try:
                status = await self._runner.run_turn(
                    turn, retry_errors=not last, before_step=self.before_step
                )
            except (asyncio.CancelledError, LeaseLost):
                raise
            except Exception as exc:
                await self._failed_attempt(job, exc, owner=owner)
                return
            if status == "waiting":
                await self._store.job_waiting(job.id, owner=owner)
                log.info("job waiting for an approval")
                return
            turn = await self._store.load_turn(job.turn_id)
            self._faults.hit("after_job_turn")
        final: TurnStatus = "done" if turn.status == "done" else "failed"
        error = None if final == "done" else (turn.error or "the turn failed")
        outcome = await self._store.finish_job(
            job.id,
            owner=owner,
            turn_status=final,
            error=error,
            failure_limit=self.policy.failure_limit,
            pause_note=PAUSED_NOTE,
        )
        log.info("job finished", status=final, error=error)
        if outcome is not None and outcome.paused is not None and outcome.note_id is not None:
            log.warning("schedule paused after repeated failures", failures=outcome.paused.failures)
            receipt = await self._outbound.send(
                Reply(
                    conversation=turn.conversation,
                    text=PAUSED_NOTE.format(id=outcome.paused.id, failures=outcome.paused.failures),
                    idempotency_key=f"job:{job.id}:paused",
                )
            )
            await self._store.note_sent(outcome.note_id, receipt=receipt)

    async def _remind(self, job: JobRecord, *, owner: str) -> None:
        """A reminder: post the schedule's text as it is, no model call. The post is
        stored once and sent under one idempotency key, so a retry after a crash sends
        it again only under the same key, which platforms that can dedupe on do."""
        assert job.turn_id is not None
        turn = await self._store.load_turn(job.turn_id)
        if self._may_talk is not None and not await self._may_talk(turn.user, turn.conversation):
            await self._refuse(job, turn, owner=owner)
            return
        await self._say_if_late(job, turn.conversation, owner=owner)
        found = await self._store.reminder(job.id, owner=owner)
        if found is None:
            raise LeaseLost(f"job {job.id}")
        note_id, text, receipt = found
        error = None
        if receipt is None:
            reply = Reply(conversation=turn.conversation, text=text,
                          idempotency_key=f"job:{job.id}:message")  # fmt: skip
            try:
                receipt = await self._outbound.send(reply)
            except (asyncio.CancelledError, LeaseLost):
                raise
            except Exception as exc:
                if (error := await self._retry_or_give_up(job, exc, owner=owner)) is None:
                    return
            else:
                await self._store.note_sent(note_id, receipt=receipt)
        await self._store.finish_job(
            job.id,
            owner=owner,
            turn_status="failed" if error else "done",
            error=error,
            failure_limit=self.policy.failure_limit,
            pause_note=PAUSED_NOTE,
        )
        log.info("reminder posted" if error is None else "reminder not delivered", error=error)

    async def _say_if_late(self, job: JobRecord, where: ConversationKey, *, owner: str) -> None:
        """A schedule run that started over a minute after its time says so in the chat
        first (once), with how late it is."""
        times = None if job.run_id is None else await self._store.run_times(job.run_id)
        if times is None:
            return
        due, started = times
        if started is None:
            return
        lag = (started - due).total_seconds()
        if lag <= self.policy.late_after.total_seconds():
            return
        # Seconds only where the time has them (a 09:00 digest reads "09:00").
        at = f"{due:%Y-%m-%d %H:%M}" + (f":{due:%S}" if due.second or due.microsecond else "")
        text = LATE_NOTE.format(id=job.schedule_id, due=at, lag=lag_note(lag, late=True))
        found = await self._store.job_note(job.id, "late", text, owner=owner)
        if found is None:
            raise LeaseLost(f"job {job.id}")
        note_id, receipt = found
        if receipt is None:
            await deliver_note(self._store, self._outbound, where, note_id, text,
                               key=f"job:{job.id}:late")  # fmt: skip

    async def _refuse(self, job: JobRecord, turn: TurnRecord, *, owner: str) -> None:
        """The job's owner may no longer talk to the agent: no model call; the job ends,
        its schedule pauses, and the conversation is told."""
        trigger_id = trigger_of(turn.user)
        kind = "schedule" if job.schedule_id else "bg" if trigger_id is None else "trigger"
        text = JOB_REFUSED[kind].format(id=job.schedule_id or trigger_id, user=turn.user)
        note_id = await self._store.refuse_job(job.id, owner=owner, error=NO_ACCESS, note=text)
        log.warning("job not run: its owner lost access", user=turn.user)
        if note_id is not None:
            await deliver_note(
                self._store,
                self._outbound,
                turn.conversation,
                note_id,
                text,
                key=f"job:{job.id}:no-access",
            )

    async def _run_upkeep(self, job: JobRecord, *, owner: str) -> None:
        """An ``extract`` or ``maintain`` job: no turn, no reply; retried like a turn."""
        error = None
        try:
            if self._upkeep is None:
                raise RuntimeError(f"this process cannot run {job.kind} jobs")
            await self._upkeep.run(job, owner=owner)
        except (asyncio.CancelledError, LeaseLost):
            raise
        except Exception as exc:
            if (error := await self._retry_or_give_up(job, exc, owner=owner)) is None:
                return
            log.error("job failed for good", error=error)
        await self._store.finish_job(
            job.id,
            owner=owner,
            turn_status="failed" if error else "done",
            error=error,
            failure_limit=self.policy.failure_limit,
            pause_note=PAUSED_NOTE,
        )
        log.info("job finished", status="failed" if error else "done")

    async def _retry_or_give_up(self, job: JobRecord, exc: Exception, *, owner: str) -> str | None:
        """A failed attempt: back in the queue with backoff (None), or, on the last one,
        the error the job ends with."""
        if job.attempts < self.policy.max_attempts:
            await self._failed_attempt(job, exc, owner=owner)
            return None
        return f"{type(exc).__name__}: {exc}"

    async def _failed_attempt(self, job: JobRecord, exc: Exception, *, owner: str) -> None:
        error = f"{type(exc).__name__}: {exc}"
        at = utcnow() + self.policy.backoff(job.attempts)
        log.warning("job attempt failed; retrying later", error=error, retry_at=at.isoformat())
        await self._store.retry_job(job.id, owner=owner, at=at, error=error)

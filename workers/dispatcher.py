"""The schedule dispatcher: one tick fires every due slot and hands its jobs to the queue.

Safe to run in many processes at once (two beats, several embedded runners): the claim is
one transaction per batch and each slot is unique in ``schedule_runs`` (see
``agent_core.storage.schedules``). With a broker, a tick also re-sends jobs the broker
never got (a crash between commit and publish), lost (a broker restart), or whose worker
died mid-run (its lease expired): the job row, not the broker, is the truth.

A job the broker handed to a worker that never started it (a worker hung in another job
still holds the message, unacknowledged, until the broker's visibility timeout) is sent
again once nothing waits in the broker's queue and the job has stayed queued for
``stranded_after``: with no backlog a live worker starts a job within moments, so the one
that has it is stuck. A duplicate message is harmless: the claim is a compare-and-set.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo

import structlog

from agent_core.events import utcnow
from agent_core.faults import FaultPoints
from agent_core.jobs import JobQueue
from agent_core.records import DueSchedule
from agent_core.scheduling.fire_times import cron_descending
from agent_core.scheduling.service import Schedules
from agent_core.stores import JobStore, ScheduleStore

log = structlog.get_logger("chatgate.dispatcher")

BATCH = 500
# How often a dispatcher records that it is alive (``chatgate doctor`` reads it).
BEAT_EVERY = 5.0
# The shortest wait between ticks (a slot due now is fired by this tick).
MIN_SLEEP = 0.02
BUSY_SLEEP = 0.5
STRANDED_AFTER = timedelta(seconds=30)
_UTC = ZoneInfo("UTC")


class DispatcherStore(ScheduleStore, JobStore, Protocol):
    """What this module asks of the storage."""


def latest_slot(cron: str, now: datetime) -> datetime:
    """The last time ``cron`` (in UTC) fired at or before ``now``."""
    return next(cron_descending(cron, _UTC, now))


@dataclass(frozen=True, slots=True)
class Tick:
    """What one tick did."""

    schedules: int
    jobs: int
    resent: int
    seconds: float
    # The earliest moment something becomes due after this tick (None: nothing known).
    next_due: datetime | None = None


class ScheduleDispatcher:
    """Claims due schedules, creates their runs and jobs, and submits them."""

    def __init__(
        self,
        store: DispatcherStore,
        schedules: Schedules,
        queue: JobQueue,
        *,
        resend_after: timedelta | None = None,
        backlog: Callable[[], Awaitable[int]] | None = None,
        stranded_after: timedelta = STRANDED_AFTER,
        batch: int = BATCH,
        maintenance: str | None = None,
        faults: FaultPoints | None = None,
        owner: str | None = None,
    ) -> None:
        self._store = store
        # Who beats in the ``beats`` table (None: this dispatcher does not).
        self._owner = owner
        self._last_beat = -BEAT_EVERY
        self._faults = faults or FaultPoints()
        self._schedules = schedules
        self._queue = queue
        self._resend_after = resend_after
        self._backlog = backlog
        self._stranded_after = stranded_after
        self._batch = batch
        self._maintenance = maintenance
        self._maintenance_seen: datetime | None = None

    async def _plan_maintenance(self, cron: str, now: datetime) -> list[int]:
        """Queue the memory review when its slot has come (once per slot, by anyone)."""
        slot = latest_slot(cron, now)
        if self._maintenance_seen is not None and slot <= self._maintenance_seen:
            return []
        jobs = await self._store.plan_maintenance(slot=slot)
        self._maintenance_seen = slot
        if jobs:
            log.info("memory maintenance queued", slot=slot.isoformat(), jobs=len(jobs))
            await self._queue.submit(jobs)
        return jobs

    async def _broker_idle(self) -> bool:
        """Whether the broker's queue is known to be empty."""
        if self._backlog is None:
            return False
        try:
            return await self._backlog() == 0
        except Exception as exc:
            log.warning("could not read the broker's queue length", error=str(exc))
            return False

    async def _beat(self) -> None:
        if self._owner is None or time.monotonic() - self._last_beat < BEAT_EVERY:
            return
        self._last_beat = time.monotonic()
        await self._store.beat("dispatcher", owner=self._owner)

    def sleep_after(self, tick: Tick, *, every: float) -> float:
        """How long to wait before the next tick: ``every``, or less when something
        falls due sooner (a 09:00 slot is fired at 09:00, not up to ``every`` later)."""
        if tick.next_due is None:
            return every
        until = (tick.next_due - utcnow()).total_seconds()
        if until <= 0:
            # Due already and not fired by this tick: another dispatcher holds it, or it
            # could not be sent. Look again soon, without spinning.
            return min(every, BUSY_SLEEP)
        return min(every, max(until, MIN_SLEEP))

    async def tick(self, now: datetime | None = None) -> Tick:
        """Fire everything due at ``now`` (default: the clock)."""
        started = time.perf_counter()
        now = now or utcnow()
        claimed = 0
        created: list[int] = []
        # A plan is a function of the recurrence, the stored next run and ``now``: the
        # schedules due together mostly share one (every person's 09:00 digest).
        plans: dict[tuple[object, ...], tuple[list[datetime], datetime | None]] = {}

        def plan(due: DueSchedule) -> tuple[list[datetime], datetime | None]:
            key = (due.kind, due.spec, due.timezone, due.anchor, due.missed, due.next_run_at)
            if key not in plans:
                plans[key] = self._schedules.plan(due, now=now)
            slots, following = plans[key]
            return list(slots), following

        while True:
            count, jobs = await self._store.dispatch_due(now=now, plan=plan, limit=self._batch)
            claimed += count
            created.extend(jobs)
            if jobs:
                self._faults.hit("after_slots_committed")
                await self._queue.submit(jobs)
            if count < self._batch:
                break
        resent = 0
        if self._resend_after is not None:
            # The broker is asked only when some job has waited ``stranded_after``.
            shortest = min(self._resend_after, self._stranded_after)
            lost = await self._store.jobs_to_send(now=now, resend_after=shortest)
            if lost and not await self._broker_idle():
                lost = await self._store.jobs_to_send(now=now, resend_after=self._resend_after)
            made = set(created)
            lost = [job for job in lost if job not in made]
            if lost:
                await self._queue.submit(lost)
                resent = len(lost)
        if self._maintenance is not None:
            created.extend(await self._plan_maintenance(self._maintenance, now))
        await self._beat()
        # Jobs waiting for their moment (jitter) are the dispatcher's to send only with a
        # broker; the embedded runner claims them itself.
        upcoming = await self._store.next_due(jobs=self._resend_after is not None)
        tick = Tick(claimed, len(created), resent, time.perf_counter() - started, upcoming)
        if claimed or resent:
            log.info(
                "dispatched",
                schedules=tick.schedules,
                jobs=tick.jobs,
                resent=tick.resent,
                seconds=round(tick.seconds, 4),
            )
        return tick

"""The embedded profile's job runner: an asyncio loop over the job table, no broker.

It claims due jobs (and jobs whose runner died: their lease expired) and runs up to
``concurrency`` of them at once, and ticks the schedule dispatcher. Interactive turns come
first: while the gateway has conversation lanes running, it takes no new job (the ones it
is running go on), so a queue of thousands of background jobs does not slow a chat down.
Several processes may run it over one database: every claim is a compare-and-set.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence

import structlog

from agent_core.jobs import JobRunner
from workers.dispatcher import BEAT_EVERY, ScheduleDispatcher

log = structlog.get_logger("chatgate.runner")


class InteractiveFirst:
    """Background work gives way while the gateway answers people.

    ``wait`` returns once no conversation lane has run for ``quiet`` seconds, or after
    ``max_wait`` (so a steady stream of chat slows background work down but never stops
    it). The runner awaits it before claiming a job and before each model call of a job.
    """

    def __init__(
        self, active: Callable[[], int], *, quiet: float = 0.05, max_wait: float = 2.0
    ) -> None:
        self._active = active
        self._quiet = quiet
        self._max_wait = max_wait
        self._last_busy = 0.0

    def idle(self) -> None:
        """The last lane just ended."""
        self._last_busy = time.monotonic()

    def busy(self) -> bool:
        """Is an interactive turn running, or did one end a moment ago?"""
        if self._active() > 0:
            return True
        return time.monotonic() - self._last_busy < self._quiet

    async def wait(self) -> None:
        """Until the gateway is quiet (at most ``max_wait``)."""
        deadline = time.monotonic() + self._max_wait
        # A 5 ms poll, only while the gateway is busy: lanes start and end too often to
        # signal each one.
        while self.busy() and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.005)


class LocalRunner:
    """Polls the job table and runs jobs, bounded; also the job queue of its process."""

    def __init__(
        self,
        jobs: JobRunner,
        *,
        owner: str,
        concurrency: int,
        poll_seconds: float = 0.5,
        busy: Callable[[], bool] = lambda: False,
    ) -> None:
        self._jobs = jobs
        self._owner = owner
        self._concurrency = concurrency
        self._poll = poll_seconds
        self._busy = busy
        self._running: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._last_beat = -BEAT_EVERY

    @property
    def running(self) -> int:
        """How many jobs run here right now."""
        return len(self._running)

    async def submit(self, job_ids: Sequence[int]) -> None:
        """New jobs are stored: look now instead of at the next poll."""
        self._wake.set()

    def wake(self) -> None:
        """Look for work now (a slot freed, an interactive burst ended)."""
        self._wake.set()

    async def _beat(self) -> None:
        if time.monotonic() - self._last_beat < BEAT_EVERY:
            return
        self._last_beat = time.monotonic()
        try:
            await self._jobs.alive(owner=self._owner)
        except Exception:
            log.exception("recording the runner's beat failed")

    async def serve(self, stopping: asyncio.Event) -> None:
        """Claim and run jobs until ``stopping`` is set: as many at once as there are free
        slots, in one claim."""
        while not stopping.is_set():
            await self._beat()
            found = []
            free = self._concurrency - len(self._running)
            if free > 0 and not self._busy():
                try:
                    found = await self._jobs.claim_many(free, owner=self._owner)
                except Exception:
                    log.exception("claiming jobs failed")
            for job in found:
                task = asyncio.create_task(
                    self._jobs.execute(job, owner=self._owner), name=f"job:{job.id}"
                )
                self._running.add(task)
                task.add_done_callback(self._finished)
            if found:
                continue
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll):
                    await self._wake.wait()

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("job crashed", exc_info=task.exception())
        self._wake.set()

    async def drain(self, grace: float) -> int:
        """Let running jobs finish for ``grace`` s, cancel the rest (each is handed back,
        due at once for another runner or the next start); return how many."""
        self._jobs.draining = True
        if not self._running:
            return 0
        _done, pending = await asyncio.wait(set(self._running), timeout=grace)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        return len(pending)


async def tick_forever(
    dispatcher: ScheduleDispatcher, *, every: float, stopping: asyncio.Event
) -> None:
    """Tick the dispatcher every ``every`` seconds (sooner when a slot falls due sooner)
    until stopped."""
    while not stopping.is_set():
        wait = every
        try:
            wait = dispatcher.sleep_after(await dispatcher.tick(), every=every)
        except Exception:
            log.exception("dispatcher tick failed")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                await stopping.wait()

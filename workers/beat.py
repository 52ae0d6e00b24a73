"""``chatgate beat``: Celery beat whose tick is our schedule dispatcher.

The schedules are rows in our database, not beat entries: each tick claims the due slots
(exactly once even with several beats running), creates their jobs and sends them to the
workers, and re-sends jobs the broker lost or whose worker died.
"""

from __future__ import annotations

import time
from typing import Any

import structlog
from celery.beat import Scheduler

from agent_core.settings import Settings
from workers.bootstrap import WorkerRuntime
from workers.celery_app import CeleryJobQueue

log = structlog.get_logger("chatgate.beat")

_settings: Settings | None = None


def configure(settings: Settings) -> None:
    """The settings the scheduler builds its runtime from (set before beat starts)."""
    global _settings
    _settings = settings


class DispatchScheduler(Scheduler):  # type: ignore[misc]
    """A beat scheduler that ticks ``ScheduleDispatcher`` every ``schedule_tick_seconds``,
    or sooner when a slot falls due sooner."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._runtime: WorkerRuntime | None = None
        self._queue: CeleryJobQueue | None = None
        super().__init__(*args, **kwargs)

    def setup_schedule(self) -> None:
        """No static entries; start our runtime."""
        assert _settings is not None, "workers.beat.configure was not called"
        runtime = WorkerRuntime(_settings)
        runtime.start()
        assert runtime.core is not None
        self._queue = CeleryJobQueue(self.app, runtime.core.store)
        runtime.attach_dispatcher(self._queue)
        self._runtime = runtime
        log.info("beat ready", owner=runtime.owner, every=_settings.schedule_tick_seconds)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """One dispatcher pass; returns the seconds until the next."""
        assert _settings is not None
        assert self._runtime is not None
        every = _settings.schedule_tick_seconds
        started = time.monotonic()
        dispatcher = self._runtime.dispatcher
        assert dispatcher is not None
        try:
            done = self._runtime.call(dispatcher.tick(), timeout=max(60.0, every * 10))
        except Exception:
            log.exception("dispatcher tick failed")
            return max(every - (time.monotonic() - started), 0.05)
        return dispatcher.sleep_after(done, every=every)

    def close(self) -> None:
        """Stop the runtime."""
        if self._queue is not None:
            self._queue.close()
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None
        super().close()

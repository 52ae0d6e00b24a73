"""The Celery tasks: thin, by id. Everything they do is in ``agent_core.jobs``."""

from __future__ import annotations

import os
import threading
from typing import Any

import structlog
from celery import Celery, signals

from agent_core import tracing
from agent_core.hardening import harden_process
from agent_core.settings import Settings
from workers.bootstrap import WorkerRuntime

log = structlog.get_logger("chatgate.tasks")

_lock = threading.Lock()
_runtime: WorkerRuntime | None = None
_settings: Settings | None = None


def runtime() -> WorkerRuntime:
    """This process's runtime, started on first use (prefork children start it at init)."""
    global _runtime
    with _lock:
        if _runtime is None:
            assert _settings is not None, "workers.tasks.register was not called"
            started = WorkerRuntime(_settings, warm=True)
            started.start()
            _runtime = started
        return _runtime


@signals.worker_process_init.connect
def _process_init(**_kwargs: Any) -> None:
    # A pool child inherits the parent's hardening through fork; say it again anyway, in
    # case the pool ever starts children another way.
    harden_process()
    if _settings is not None:
        tracing.setup(os.environ, role="worker")
        runtime()


@signals.worker_process_shutdown.connect
def _process_shutdown(**_kwargs: Any) -> None:
    global _runtime
    with _lock:
        if _runtime is not None:
            _runtime.close()
            _runtime = None
    tracing.shutdown()


def preload(settings: Settings) -> None:
    """Import what a job needs before the pool forks (call in the worker's parent)."""
    if settings.model:
        from agent_core.model_litellm import preload as preload_litellm

        preload_litellm()


def register(app: Celery, settings: Settings) -> None:
    """Add the tasks to ``app``; ``settings`` configure the runtime of each process."""
    global _settings
    _settings = settings
    time_limit = settings.job_time_limit_seconds

    @app.task(name="chatgate.run_job", ignore_result=True)
    def run_job(job_id: int) -> None:
        """Run one job (a no-op when it is done or another worker holds it)."""
        worker = runtime()
        assert worker.core is not None
        ran = worker.call(worker.core.jobs.run(job_id, owner=worker.owner), timeout=time_limit)
        if ran is None:
            log.info("job not claimable here; nothing to do", job_id=job_id)

"""The Celery app (scaled profile): Redis broker, settings from ARCHITECTURE.md.

Every task is journaled and idempotent, so a task whose worker dies is redelivered
(``acks_late`` + ``reject_on_worker_lost``), and the time limit stays below the broker's
visibility timeout so a slow task is never handed to a second worker while it runs. Results
are ignored: the state is in our database. No task waits in the broker with a countdown:
retries and future runs are rows the dispatcher sends when they are due.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog
from celery import Celery

from agent_core.events import utcnow
from agent_core.settings import Settings
from agent_core.stores import JobStore

log = structlog.get_logger("chatgate.celery")

QUEUE = "chatgate.jobs"
PUBLISH_BATCH = 500
RUN_JOB = "chatgate.run_job"


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery settings (ARCHITECTURE.md, "Queued path")."""
    time_limit = settings.job_time_limit_seconds
    visibility = 2 * time_limit
    return {
        "broker_url": settings.redis_url,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {
            "visibility_timeout": visibility,
            # kombu 5.7: look for unacked messages of dead workers every 10 s, not ~100 s.
            "unacked_restore_interval": 10,
            "unacked_restore_throttle": 1,
        },
        "visibility_timeout": visibility,
        "result_backend": None,
        "task_ignore_result": True,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_time_limit": time_limit,
        "task_soft_time_limit": time_limit - 5,
        "task_default_queue": QUEUE,
        "task_serializer": "json",
        "accept_content": ["json"],
        "worker_prefetch_multiplier": 1,
        "worker_disable_prefetch": True,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "worker_soft_shutdown_timeout": settings.drain_seconds,
        "worker_hijack_root_logger": False,
        "worker_redirect_stdouts": False,
        "timezone": "UTC",
        "enable_utc": True,
    }


def make_celery(settings: Settings) -> Celery:
    """The app with our settings and tasks."""
    from workers import tasks

    app = Celery("chatgate", set_as_current=True)
    app.conf.update(celery_config(settings))
    tasks.register(app, settings)
    return app


class CeleryJobQueue:
    """Hands job ids to the broker and records that it did (the dispatcher re-sends any
    that never got there)."""

    def __init__(self, app: Celery, store: JobStore) -> None:
        self._app = app
        self._store = store
        # kombu's producer is not for concurrent use: one publishing thread.
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="celery-publish")

    def _publish(self, job_ids: Sequence[int]) -> None:
        # One connection, and kombu's publish batch: the messages go to Redis in pipelines
        # of PUBLISH_BATCH commands, not one round trip each. A failure raises before the
        # rows are marked sent; the dispatcher sends unsent jobs again.
        with self._app.producer_or_acquire() as producer, producer.batch(PUBLISH_BATCH):
            for job_id in job_ids:
                self._app.send_task(
                    RUN_JOB, args=[job_id], task_id=f"job-{job_id}", queue=QUEUE,
                    producer=producer,
                )  # fmt: skip

    def _waiting(self) -> int:
        with self._app.connection_for_write() as connection:
            declared = connection.default_channel.queue_declare(queue=QUEUE)
        return int(declared.message_count)

    async def waiting(self) -> int:
        """How many messages wait in the broker's queue (not yet taken by a worker)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._waiting)

    async def submit(self, job_ids: Sequence[int]) -> None:
        """Publish, then mark the rows as sent."""
        if not job_ids:
            return
        now = utcnow()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self._publish, list(job_ids))
        await self._store.jobs_sent(list(job_ids), now=now)
        log.debug("jobs sent to the broker", jobs=len(job_ids))

    def close(self) -> None:
        """Stop the publishing thread."""
        self._thread.shutdown(wait=True)

"""``chatgate doctor``'s schedules check: runs that started late lately, and the causes
it can see (no dispatcher ticking, no worker, a queue deeper than the workers drain)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from adapters.base import Check
from agent_core.errors import StorageError
from agent_core.events import utcnow
from agent_core.records import LATE_AFTER, LagReport
from agent_core.settings import Settings
from agent_core.storage.database import Database
from agent_core.storage.store import Store

WINDOW = timedelta(hours=1)


def _ping_workers(settings: Settings) -> int:
    """How many Celery workers answer a ping within a second."""
    from workers.celery_app import make_celery

    app = make_celery(settings)
    try:
        return len(app.control.ping(timeout=1.0) or [])
    finally:
        app.close()


def _silent(beat: datetime | None, *, now: datetime, allowed: float, verb: str) -> str | None:
    """How long a role has been silent ("has ever ticked", "has ticked since ..."), or
    None when its last beat is at most ``allowed`` seconds old."""
    if beat is None:
        return f"has ever {verb}"
    if (now - beat).total_seconds() > allowed:
        return f"has {verb} since {beat:%Y-%m-%d %H:%M:%S} UTC"
    return None


async def causes(
    settings: Settings, report: LagReport, depth: dict[str, int], oldest: float
) -> list[tuple[str, str]]:
    """What the doctor can see that makes runs late: (cause, how to fix it)."""
    now = utcnow()
    found: list[tuple[str, str]] = []
    allowed = max(60.0, 3 * settings.schedule_tick_seconds)
    dispatcher = report.beats.get("dispatcher")
    if (quiet := _silent(dispatcher, now=now, allowed=allowed, verb="ticked")) is not None:
        found.append(
            (
                f"dispatcher down: no dispatcher {quiet}",
                "start `chatgate beat`" if settings.redis_url else "start `chatgate run`",
            )
        )
    if settings.redis_url:
        try:
            workers = await asyncio.to_thread(_ping_workers, settings)
        except Exception as exc:
            workers = 0
            found.append((f"could not ask the workers: {exc}", "check CHATGATE_REDIS_URL"))
        if workers == 0:
            found.append(("no worker: no Celery worker answers a ping", "start `chatgate worker`"))
    elif quiet := _silent(report.beats.get("runner"), now=now, allowed=60.0, verb="run"):
        found.append((f"no worker: no job runner {quiet}", "start `chatgate run`"))
    queued = depth.get("queued", 0)
    if queued and oldest > LATE_AFTER.total_seconds():
        found.append(
            (
                f"queue depth: {queued} jobs queued, the oldest due {oldest:.0f} s ago",
                "add workers or raise CHATGATE_JOB_CONCURRENCY, or give the schedules due "
                "together a jitter window",
            )
        )
    return found


async def schedule_lag(settings: Settings) -> Check:
    """Late runs in the last hour, with the causes in sight."""
    database = Database(settings.database_url)
    try:
        current, head = await database.revision_status()
        if current != head:
            return Check("schedules", "ok", "the database is not migrated yet: no runs to read")
        store = Store(database)
        report = await store.lag_report(WINDOW)
        depth, oldest = await store.job_depth()
    except (StorageError, OSError, TimeoutError) as exc:
        return Check("schedules", "WARN", f"could not read the runs: {exc}", "see `database`")
    finally:
        await database.dispose()
    trouble = []
    if report.late:
        worst = f"{report.worst:.0f} s" if report.worst is not None else "?"
        trouble.append(
            f"{report.late} of {report.started} runs in the last hour started over a minute "
            f"late (worst {worst})"
        )
    if report.waiting:
        trouble.append(f"{report.waiting} runs due over a minute ago have not started")
    if report.overdue:
        trouble.append(f"{report.overdue} schedules' slots passed over a minute ago unfired")
    if not trouble:
        return Check("schedules", "ok", f"{report.started} runs in the last hour, none late")
    seen = await causes(settings, report, depth, oldest)
    detail = (
        "; ".join(trouble)
        + ". "
        + (
            "Causes seen: " + "; ".join(cause for cause, _fix in seen)
            if seen
            else "No cause is visible now (it may have passed)"
        )
    )
    fixes = (
        "; ".join(fix for _cause, fix in seen)
        or "see /jobs in the chat and the console's schedules"
    )
    return Check("schedules", "WARN", detail, fixes)

"""A burst of due schedules through the scaled profile's dispatcher (``chatgate beat``,
the real Redis) with SIGKILLs in the middle of it: after the restarts every slot has fired
exactly once, with one turn and one job, and every job has reached the broker."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta
from pathlib import Path

import redis
from sqlalchemy import func, select

from agent_core.events import utcnow
from agent_core.storage.database import Database
from agent_core.storage.schema import jobs, schedule_runs, turns
from bench.schedule_burst import seed_due
from tests.fakes.gateway import RoleProcess
from workers.celery_app import QUEUE
from workers.dispatcher import BATCH

DUE = 6_000


async def _seed(url: str) -> None:
    database = Database(url)
    try:
        await database.migrate()
        await seed_due(database, DUE, utcnow() + timedelta(seconds=1), platform="web")
    finally:
        await database.dispose()


def _state(url: str) -> dict[str, object]:
    """Counts of runs, distinct slots, turns and jobs, the jobs never sent, all job ids."""

    async def read() -> dict[str, object]:
        database = Database(url)
        try:
            return await database.read(
                lambda conn: {
                    "runs": conn.execute(
                        select(func.count()).select_from(schedule_runs)
                    ).scalar_one(),
                    "slots": conn.execute(
                        select(func.count()).select_from(
                            select(schedule_runs.c.schedule_id, schedule_runs.c.scheduled_for)
                            .distinct()
                            .subquery()
                        )
                    ).scalar_one(),
                    "turns": conn.execute(select(func.count()).select_from(turns)).scalar_one(),
                    "jobs": conn.execute(select(func.count()).select_from(jobs)).scalar_one(),
                    "unsent": conn.execute(
                        select(func.count()).where(jobs.c.enqueued_at.is_(None))
                    ).scalar_one(),
                    "ids": set(conn.execute(select(jobs.c.id)).scalars()),
                }
            )
        finally:
            await database.dispose()

    return asyncio.run(read())


def _published(redis_url: str) -> set[int]:
    """The job ids of the messages waiting in the broker's queue."""
    client = redis.Redis.from_url(redis_url)
    try:
        bodies = client.lrange(QUEUE, 0, -1)
    finally:
        client.close()
    return {int(json.loads(body)["headers"]["id"].removeprefix("job-")) for body in bodies}


def test_a_dispatcher_killed_mid_burst_fires_every_slot_once_after_restarts(
    database_url: str, redis_url: str, tmp_path: Path
) -> None:
    """6,000 schedules due in the same second, no worker. The beat dies (SIGKILL) right
    after committing its first batch and before publishing it, then is SIGKILLed from
    outside while the rest of the burst is being written and sent, then runs to the end:
    one run per slot, one turn and one job per run, every job published."""
    asyncio.run(_seed(database_url))
    settings = {
        "CHATGATE_DATABASE_URL": database_url,
        "CHATGATE_REDIS_URL": redis_url,
        "CHATGATE_STATE_DIR": str(tmp_path / "state"),
        "CHATGATE_SCHEDULE_TICK_SECONDS": "0.5",
        "CHATGATE_LOG_LEVEL": "info",
    }
    beat = RoleProcess("beat", workdir=tmp_path, settings=settings)
    try:
        beat.settings["CHATGATE_TEST_FAULT"] = "after_slots_committed"
        beat.start()
        assert beat.process is not None
        assert beat.process.wait(60) == -9, beat.log
        killed = _state(database_url)
        assert (killed["runs"], killed["jobs"], killed["unsent"]) == (BATCH, BATCH, BATCH)
        assert _published(redis_url) == set()

        del beat.settings["CHATGATE_TEST_FAULT"]
        beat.start()
        deadline = time.monotonic() + 60
        while (runs := _state(database_url)["runs"]) < 3 * BATCH:
            assert time.monotonic() < deadline, beat.log
            time.sleep(0.01)
        beat.kill()
        assert runs < DUE, "the burst ended before the kill: nothing was killed mid-burst"
        mid = _state(database_url)
        assert BATCH < mid["runs"] < DUE  # type: ignore[operator]

        beat.start()
        deadline = time.monotonic() + 90
        while (state := _state(database_url))["runs"] < DUE or state["unsent"]:
            assert time.monotonic() < deadline, (state["runs"], state["unsent"], beat.log)
            time.sleep(0.2)
    finally:
        beat.kill()
    assert state["runs"] == state["slots"] == state["turns"] == state["jobs"] == DUE
    # Every job reached the broker (some twice, when a kill fell between publishing a
    # batch and recording it: the worker's claim makes a second message a no-op).
    assert _published(redis_url) == state["ids"]

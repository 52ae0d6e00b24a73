"""Schedules at scale (issue #28): 10,000 schedules due in the same minute, each delivering
to a conversation of its own (a 09:00 digest for every person). One dispatcher tick at the
slot: how long until every run, turn and job is written and handed to the queue, and how
long until the first job is queued.

    schedule burst  <db>  10,000 due: dispatched in X s (Y/s); first job queued after Z ms

``python -m bench.schedule_burst`` (also in ``make bench``). SQLite in a temporary file;
PostgreSQL in a fresh database when ``CHATGATE_BENCH_POSTGRES_URL`` (or the default local
server) answers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

import structlog
from sqlalchemy import insert, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import SQLAlchemyError

from agent_core.events import utcnow
from agent_core.scheduling.service import ScheduleLimits, Schedules
from agent_core.storage.database import Database
from agent_core.storage.schema import conversations, schedule_targets, schedules
from agent_core.storage.store import Store
from workers.dispatcher import ScheduleDispatcher

DUE = 10_000
POSTGRES = "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
# Measured with this benchmark on 2026-12-04 on the 2-core CI machine, at 97df9b0: the
# dispatcher before the set-based claim (four statements a schedule). Printed beside.
BEFORE = {"sqlite": (5.32, 0.267), "postgresql": (12.47, 0.544)}


class _TimedQueue:
    """A job queue that notes when jobs arrive (nothing runs them)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.first: float | None = None
        self.jobs = 0

    async def submit(self, job_ids: Sequence[int]) -> None:
        if job_ids and self.first is None:
            self.first = time.perf_counter()
        self.jobs += len(job_ids)


async def seed_due(
    database: Database,
    count: int,
    slot: datetime,
    *,
    jitter_seconds: int = 0,
    platform: str = "slack",
    spec: str = "0 9 * * *",
) -> list[str]:
    """``count`` schedules due at ``slot``, each delivering to a conversation of its own
    on ``platform`` (a 09:00 digest for every person); their ids."""
    now = utcnow()
    people = [
        {"id": uuid.uuid4().hex, "platform": platform, "workspace": "T0BENCH" if platform
         == "slack" else "local", "channel": f"D{index:08d}", "thread": "", "created_at": now,
         "updated_at": now}
        for index in range(count)
    ]  # fmt: skip
    user = "slack:U{:08d}" if platform == "slack" else "web:p{:08d}"
    rows = [
        {"id": f"sc_{index:08x}", "conversation_id": person["id"],
         "created_by": user.format(index), "prompt": "the morning digest", "kind": "cron",
         "spec": spec, "timezone": "UTC", "anchor": None, "missed": "run_once",
         "status": "active", "next_run_at": slot, "failures": 0,
         "jitter_seconds": jitter_seconds, "created_at": now, "updated_at": now}
        for index, person in enumerate(people)
    ]  # fmt: skip
    targets = [{"schedule_id": r["id"], "conversation_id": r["conversation_id"]} for r in rows]

    def write(conn: Connection) -> None:
        conn.execute(insert(conversations), people)
        conn.execute(insert(schedules), rows)
        conn.execute(insert(schedule_targets), targets)

    await database.write(write)
    return [str(row["id"]) for row in rows]


async def burst(url: str) -> tuple[float, float]:
    """(seconds to dispatch every due schedule, seconds until the first job was queued)."""
    database = Database(url)
    await database.migrate()
    try:
        slot = utcnow().replace(hour=9, minute=0, second=0, microsecond=0) + timedelta(days=1)
        await seed_due(database, DUE, slot)
        store = Store(database)
        queue = _TimedQueue()
        dispatcher = ScheduleDispatcher(store, Schedules(store, limits=ScheduleLimits()), queue)
        started = time.perf_counter()
        tick = await dispatcher.tick(slot + timedelta(seconds=1))
        took = time.perf_counter() - started
        assert tick.jobs == DUE == queue.jobs, (tick, queue.jobs)
        assert queue.first is not None
        return took, queue.first - started
    finally:
        await database.dispose()


async def _fresh_pg(admin_url: str) -> tuple[float, float]:
    from sqlalchemy.ext.asyncio import create_async_engine

    name = f"chatgate_burst_{uuid.uuid4().hex[:8]}"
    engine = create_async_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            return await burst(make_url(admin_url).set(database=name).render_as_string(False))
        finally:
            async with engine.connect() as conn:
                await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        await engine.dispose()


def _line(backend: str, took: float, first: float) -> str:
    was, was_first = BEFORE[backend]
    return (
        f"schedule burst  {backend:10}  {DUE:,} due: dispatched in {took:5.2f} s "
        f"({DUE / took:6,.0f}/s); first job queued after {first * 1000:6.0f} ms   "
        f"[before: {was:5.2f} s ({DUE / was:,.0f}/s), first after {was_first * 1000:.0f} ms;"
        f" {was / took:4.1f}x faster]"
    )


def bench_schedule_burst(postgres_url: str | None = None) -> None:
    """The burst on SQLite, and on PostgreSQL when it answers."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory() as workdir:
        url = f"sqlite+aiosqlite:///{Path(workdir) / 'burst.db'}"
        print(_line("sqlite", *asyncio.run(burst(url))))
    if postgres_url:
        try:
            print(_line("postgresql", *asyncio.run(_fresh_pg(postgres_url))))
        except (OSError, SQLAlchemyError) as exc:
            print(f"schedule burst  postgresql skipped: {str(exc).splitlines()[0]}")


if __name__ == "__main__":
    bench_schedule_burst(os.environ.get("CHATGATE_BENCH_POSTGRES_URL", POSTGRES))

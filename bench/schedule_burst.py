"""Schedules at scale (issue #28): 10,000 schedules due in the same minute, each delivering
to a conversation of its own (a 09:00 digest for every person). One dispatcher tick at the
slot: how long until every run, turn and job is written and handed to the queue (on
PostgreSQL, published to Redis through the real Celery queue), and how long until the
first job is queued. Then two dispatchers ticking at once on the same burst: each slot
fired once, both taking part, done no later than one alone.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import redis
import structlog
from celery import Celery
from sqlalchemy import insert, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import SQLAlchemyError

from agent_core.events import utcnow
from agent_core.jobs import JobQueue
from agent_core.scheduling.service import ScheduleLimits, Schedules
from agent_core.storage.database import Database
from agent_core.storage.schema import conversations, schedule_targets, schedules
from agent_core.storage.store import Store
from workers.celery_app import QUEUE, CeleryJobQueue
from workers.dispatcher import ScheduleDispatcher

DUE = 10_000
REDIS = "redis://127.0.0.1:6379/12"


@dataclass(frozen=True, slots=True)
class Burst:
    """One burst: seconds until every job was handed on, until the first was, each
    dispatcher's share, and whether the jobs went to Redis."""

    seconds: float
    first: float
    shares: tuple[int, ...]
    published: bool


POSTGRES = "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
# Measured with this benchmark on 2026-12-04 on the 2-core CI machine, at 97df9b0: the
# dispatcher before the set-based claim (four statements a schedule). Printed beside.
BEFORE = {"sqlite": (5.32, 0.267), "postgresql": (12.47, 0.544)}


class _TimedQueue:
    """The job queue of the run: notes when jobs arrive, and hands them on to ``inner``
    (the real Celery queue on PostgreSQL; on SQLite the embedded runner's submit only wakes
    it, so nothing is handed on)."""

    def __init__(self, inner: JobQueue | None = None) -> None:
        self.first: float | None = None
        self.jobs = 0
        self._inner = inner

    async def submit(self, job_ids: Sequence[int]) -> None:
        if job_ids and self.first is None:
            self.first = time.perf_counter()
        self.jobs += len(job_ids)
        if self._inner is not None:
            await self._inner.submit(job_ids)


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


def _celery(store: Store) -> tuple[CeleryJobQueue, Callable[[], int]] | None:
    """The real Celery queue over the local Redis (its own database, emptied), and how to
    count what reached it; None when Redis does not answer."""
    client = redis.Redis.from_url(REDIS)
    try:
        client.flushdb()
    except redis.RedisError:
        return None
    app = Celery("chatgate-bench", broker=REDIS)
    app.conf.update(task_serializer="json", broker_connection_retry_on_startup=True)

    def published() -> int:
        count = int(client.llen(QUEUE))
        client.flushdb()
        client.close()
        return count

    return CeleryJobQueue(app, store), published


async def burst(url: str, *, dispatchers: int = 1) -> Burst:
    """Every due schedule dispatched by ``dispatchers`` ticking at once (each with its own
    connections), jobs published to Redis on PostgreSQL."""
    databases = [Database(url) for _ in range(dispatchers)]
    await databases[0].migrate()
    queues: list[_TimedQueue] = []
    counters: list[Callable[[], int]] = []
    try:
        slot = utcnow().replace(hour=9, minute=0, second=0, microsecond=0) + timedelta(days=1)
        await seed_due(databases[0], DUE, slot)
        ticking = []
        for database in databases:
            store = Store(database)
            celery = _celery(store) if database.dialect == "postgresql" else None
            if celery is not None:
                counters.append(celery[1])
            queue = _TimedQueue(celery[0] if celery else None)
            queues.append(queue)
            ticking.append(
                ScheduleDispatcher(store, Schedules(store, limits=ScheduleLimits()), queue)
            )
        started = time.perf_counter()
        ticks = await asyncio.gather(*(d.tick(slot + timedelta(seconds=1)) for d in ticking))
        took = time.perf_counter() - started
        shares = tuple(tick.jobs for tick in ticks)
        assert sum(shares) == DUE == sum(q.jobs for q in queues), (ticks, [q.jobs for q in queues])
        firsts = [q.first for q in queues if q.first is not None]
        published = sum(count() for count in counters) if counters else None
        assert published in (None, DUE), published
        return Burst(took, min(firsts) - started, shares, published is not None)
    finally:
        for database in databases:
            await database.dispose()


async def _fresh_pg(admin_url: str, *, dispatchers: int = 1) -> Burst:
    from sqlalchemy.ext.asyncio import create_async_engine

    name = f"chatgate_burst_{uuid.uuid4().hex[:8]}"
    engine = create_async_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            url = make_url(admin_url).set(database=name).render_as_string(False)
            return await burst(url, dispatchers=dispatchers)
        finally:
            async with engine.connect() as conn:
                await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        await engine.dispose()


def _line(backend: str, run: Burst) -> str:
    was, was_first = BEFORE[backend]
    handed = "; published to Redis" if run.published else ""
    return (
        f"schedule burst  {backend:10}  {DUE:,} due: dispatched in {run.seconds:5.2f} s "
        f"({DUE / run.seconds:6,.0f}/s); first job queued after {run.first * 1000:6.0f} ms"
        f"{handed}   [before: {was:5.2f} s ({DUE / was:,.0f}/s), first after "
        f"{was_first * 1000:.0f} ms; {was / run.seconds:4.1f}x faster]"
    )


def _pair_line(backend: str, one: Burst, two: Burst) -> str:
    verdict = "ok" if two.seconds <= one.seconds * 1.1 else "SLOWER"
    return (
        f"schedule burst  {backend:10}  {DUE:,} due, 2 dispatchers: {two.seconds:5.2f} s "
        f"(one: {one.seconds:5.2f} s), shares {two.shares[0]:,} + {two.shares[1]:,}, each "
        f"slot once   [{verdict}]"
    )


def bench_schedule_burst(postgres_url: str | None = None) -> None:
    """The burst on SQLite, and on PostgreSQL when it answers; one dispatcher, then two."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory() as workdir:
        one = asyncio.run(burst(f"sqlite+aiosqlite:///{Path(workdir) / 'one.db'}"))
        two = asyncio.run(burst(f"sqlite+aiosqlite:///{Path(workdir) / 'two.db'}", dispatchers=2))
    print(_line("sqlite", one))
    print(_pair_line("sqlite", one, two))
    if postgres_url:
        try:
            one = asyncio.run(_fresh_pg(postgres_url))
            two = asyncio.run(_fresh_pg(postgres_url, dispatchers=2))
        except (OSError, SQLAlchemyError) as exc:
            print(f"schedule burst  postgresql skipped: {str(exc).splitlines()[0]}")
        else:
            print(_line("postgresql", one))
            print(_pair_line("postgresql", one, two))


if __name__ == "__main__":
    bench_schedule_burst(os.environ.get("CHATGATE_BENCH_POSTGRES_URL", POSTGRES))

"""How late scheduled runs start (issue #28): 1,000 schedules due at the same second, each
delivering to a web conversation of its own, run by 2 workers against a model that answers
at once. The lag of a run is from its slot to the start of its turn (``turns.started_at``,
a moment after a worker claimed its job); the line also gives when the last run finished,
so the lag can be read against how many runs a second the workers get through.

    schedule lag  <db>  1,000 due, 2 workers, instant model: p50 A ms  p99 B ms

Default settings (``CHATGATE_JOB_CONCURRENCY`` 2). SQLite: ``chatgate run`` (its embedded
runner, 2 jobs at a time, and its dispatcher). PostgreSQL: ``chatgate beat`` and two
``chatgate worker`` processes (2 pool children each) over Redis, the real Celery, when the
local PostgreSQL and Redis answer.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import redis
from sqlalchemy import func, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from agent_core.events import utcnow
from agent_core.storage.database import Database
from agent_core.storage.schema import jobs, schedule_runs, turns
from bench.scale import _admin
from bench.schedule_burst import seed_due
from tests.fakes.gateway import GatewayProcess, RoleProcess
from tests.fakes.model_server import FakeModelServer

DUE = 1_000
WORKERS = 2
REDIS = "redis://127.0.0.1:6379/13"
# Seconds from seeding to the slot: enough to start every process and load litellm.
LEAD = 25
# (p50, p99) in seconds, measured with this benchmark (seeded without the jitter column) on
# 2026-12-05 on the 2-core CI machine at 97df9b0, before #28: a dispatcher that ticked
# every 5 s and wrote each schedule's run, turn and job one by one, an embedded runner that
# claimed one job a statement, and jobs published to Redis one round trip each.
BEFORE = {"sqlite": (6.818, 9.359), "postgresql": (12.253, 18.566)}


async def _seed(url: str, slot: datetime) -> None:
    database = Database(url)
    try:
        await database.migrate()
        await seed_due(database, DUE, slot, platform="web")
    finally:
        await database.dispose()


def _progress(url: str) -> tuple[list[float], int, datetime | None]:
    """(each started run's lag in seconds, jobs done, when the last job finished)."""

    async def read() -> tuple[list[float], int, datetime | None]:
        database = Database(url)
        try:
            return await database.read(
                lambda conn: (
                    [
                        (started - (due or slot)).total_seconds()
                        for slot, due, started in conn.execute(
                            select(
                                schedule_runs.c.scheduled_for,
                                schedule_runs.c.due_at,
                                turns.c.started_at,
                            )
                            .join(jobs, jobs.c.run_id == schedule_runs.c.id)
                            .join(turns, turns.c.id == jobs.c.turn_id)
                            .where(turns.c.started_at.is_not(None))
                        ).all()
                    ],
                    conn.execute(
                        select(func.count()).select_from(jobs).where(jobs.c.status == "done")
                    ).scalar_one(),
                    conn.execute(select(func.max(jobs.c.finished_at))).scalar(),
                )
            )
        finally:
            await database.dispose()

    return asyncio.run(read())


def _measure(url: str, start: Callable[[], None]) -> tuple[float, float, float]:
    """Seed the burst ahead, start the processes (ready, the model library loaded) before
    the slot, wait until every run is done: (p50 lag, p99 lag, seconds from the slot to
    the last job's end)."""
    slot = (utcnow() + timedelta(seconds=LEAD)).replace(microsecond=0)
    asyncio.run(_seed(url, slot))
    start()
    if utcnow() >= slot:
        raise RuntimeError(f"the processes were not ready within {LEAD} s: the slot passed")
    deadline = time.monotonic() + 600
    while True:
        lags, done, last = _progress(url)
        if done == DUE:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {done} of {DUE} runs done after 10 minutes")
        time.sleep(0.5)
    ordered = sorted(lags)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    assert last is not None
    return statistics.median(ordered), p99, (last - slot).total_seconds()


def _settings(server: FakeModelServer, workdir: Path) -> dict[str, str]:
    return {
        "CHATGATE_MODEL": "openai/gpt-4o-mini",
        "CHATGATE_MODEL_API_BASE": server.base_url,
        "CHATGATE_MODEL_API_KEY": "sk-bench",
        "CHATGATE_STATE_DIR": str(workdir / "state"),
        "CHATGATE_JOB_CONCURRENCY": str(WORKERS),
        # As deployed: the model library is loaded at start, not by the first run.
        "CHATGATE_MODEL_WARM_UP": "true",
        "CHATGATE_LOG_LEVEL": "info",  # to see them ready
    }


def _wait_for(done: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {timeout} s")
        time.sleep(0.1)


def lag_sqlite() -> tuple[float, float, float]:
    with FakeModelServer() as server, tempfile.TemporaryDirectory() as workdir:
        url = f"sqlite+aiosqlite:///{Path(workdir) / 'lag.db'}"
        gateway = GatewayProcess(
            database_url=url, workdir=Path(workdir), **_settings(server, Path(workdir))
        )

        def start() -> None:
            gateway.start(command="run")
            _wait_for(lambda: "model library loaded" in gateway.log, "the model library")

        try:
            return _measure(url, start)
        finally:
            gateway.terminate()


def lag_postgres(admin_url: str) -> tuple[float, float, float]:
    name = f"chatgate_lag_{uuid.uuid4().hex[:8]}"
    asyncio.run(_admin(admin_url, f'CREATE DATABASE "{name}"'))
    url = make_url(admin_url).set(database=name).render_as_string(False)
    broker = redis.Redis.from_url(REDIS)
    broker.flushdb()
    roles: list[RoleProcess] = []
    try:
        with FakeModelServer() as server, tempfile.TemporaryDirectory() as workdir:
            settings = {
                **_settings(server, Path(workdir)),
                "CHATGATE_DATABASE_URL": url,
                "CHATGATE_REDIS_URL": REDIS,
            }
            for index in range(WORKERS):
                (Path(workdir) / f"w{index}").mkdir()
                roles.append(
                    RoleProcess("worker", workdir=Path(workdir) / f"w{index}", settings=settings)
                )
            roles.append(RoleProcess("beat", workdir=Path(workdir), settings=settings))

            def start() -> None:
                for role in roles:
                    role.start()
                for role in roles:
                    role.wait_for_log(" ready" if role.command == "worker" else "beat ready",
                                      timeout=60)  # fmt: skip
                # Each worker's pool child loads the model library as it starts.
                for role in roles[:WORKERS]:
                    _wait_for(lambda r=role: "model library loaded" in r.log, "a worker's model")

            return _measure(url, start)
    finally:
        for role in roles:
            role.stop()
        broker.flushdb()
        broker.close()
        asyncio.run(_admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _line(backend: str, p50: float, p99: float, last: float) -> str:
    line = (
        f"schedule lag    {backend:10}  {DUE:,} due, {WORKERS} workers, instant model: "
        f"p50 {p50 * 1000:6.0f} ms  p99 {p99 * 1000:6.0f} ms   (last run done "
        f"{last:5.1f} s after the slot: {DUE / last:4.0f} runs/s)"
    )
    if backend in BEFORE:
        was50, was99 = BEFORE[backend]
        line += f"   [before: p50 {was50 * 1000:.0f} ms  p99 {was99 * 1000:.0f} ms]"
    return line


def bench_schedule_lag(postgres_url: str | None = None) -> None:
    """The lag on SQLite, and on PostgreSQL with Celery when both answer."""
    print(_line("sqlite", *lag_sqlite()))
    if postgres_url:
        try:
            print(_line("postgresql", *lag_postgres(postgres_url)))
        except (OSError, SQLAlchemyError, redis.RedisError) as exc:
            print(f"schedule lag    postgresql skipped: {str(exc).splitlines()[0]}")


if __name__ == "__main__":
    import os

    bench_schedule_lag(
        os.environ.get(
            "CHATGATE_BENCH_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
        )
    )

"""Benchmarks of the queued path (issue #4), printed as ratios.

1. Dispatcher tick time with 100,000 active schedules vs 1,000, the same 100 due each
   time (target: under 2x: a tick reads due rows through the index, not every row).
2. Isolation: web chat reply latency, p50 and p99, while 2,000 background jobs are queued
   and being worked through by the embedded runner, vs an idle runner (target: p99 under
   1.25x). Both against the same fake model.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import structlog
from sqlalchemy import insert, update
from sqlalchemy.exc import SQLAlchemyError

from agent_core.events import InboundMessage, utcnow
from agent_core.scheduling.service import ScheduleLimits, Schedules
from agent_core.storage.database import Database
from agent_core.storage.schema import schedule_targets, schedules
from agent_core.storage.store import Store
from agent_core.testing import RecordingJobQueue
from tests.fakes.gateway import GatewayProcess, http
from tests.fakes.model_server import FakeModelServer
from workers.dispatcher import ScheduleDispatcher

DUE = 100
TICKS = 7
BACKGROUND_JOBS = 2000
REPLIES = 200


async def _seed_conversation(store: Store, name: str) -> str:
    accepted = await store.accept_inbound(
        InboundMessage(
            platform="web",
            workspace="local",
            channel=name,
            user="web:bench",
            text="seed",
            platform_event_id=f"seed-{name}",
        ),
        open_turn=False,
    )
    return accepted.conversation_id


async def _tick_seconds(url: str, total: int) -> float:
    database = Database(url)
    await database.migrate()
    store = Store(database)
    try:
        conversation_id = await _seed_conversation(store, "bench")
        now = utcnow()
        later = now + timedelta(days=30)
        rows = [
            {
                "id": f"sc_{index:08x}",
                "conversation_id": conversation_id,
                "created_by": "web:bench",
                "prompt": "report",
                "kind": "interval",
                "spec": "every 1h",
                "timezone": "UTC",
                "anchor": now,
                "missed": "run_once",
                "status": "active",
                "next_run_at": later,
                "failures": 0,
                "created_at": now,
                "updated_at": now,
            }
            for index in range(total)
        ]
        targets = [{"schedule_id": row["id"], "conversation_id": conversation_id} for row in rows]
        for start in range(0, total, 10_000):
            chunk = rows[start : start + 10_000]
            chunk_targets = targets[start : start + 10_000]
            await database.write(
                lambda conn, c=chunk, t=chunk_targets: (
                    conn.execute(insert(schedules), c),
                    conn.execute(insert(schedule_targets), t),
                )
            )
        due_ids = [row["id"] for row in rows[:: total // DUE]][:DUE]
        dispatcher = ScheduleDispatcher(
            store, Schedules(store, limits=ScheduleLimits()), RecordingJobQueue()
        )
        samples = []
        for round_ in range(1, TICKS + 1):
            slot = now + timedelta(hours=round_)  # on the schedules' grid (anchor + k hours)
            tick_at = slot + timedelta(seconds=1)
            await database.write(
                lambda conn, at=slot: conn.execute(
                    update(schedules).where(schedules.c.id.in_(due_ids)).values(next_run_at=at)
                )
            )
            tick = await dispatcher.tick(tick_at)
            assert tick.jobs == DUE, tick
            samples.append(tick.seconds)
        return statistics.median(samples)
    finally:
        await database.dispose()


def bench_dispatcher(postgres_url: str | None = None) -> None:
    """Tick time with 100k vs 1k active schedules (SQLite, and PostgreSQL when given)."""
    # The dispatcher runs in this process: keep its per-tick log lines out of the report.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    backends: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as workdir:
        backends.append(("sqlite", f"sqlite+aiosqlite:///{Path(workdir) / 'small.db'}"))
        backends.append(("sqlite", f"sqlite+aiosqlite:///{Path(workdir) / 'large.db'}"))
        small = asyncio.run(_tick_seconds(backends[0][1], 1_000))
        large = asyncio.run(_tick_seconds(backends[1][1], 100_000))
    _report("sqlite", small, large)
    if postgres_url:
        try:
            small = asyncio.run(_fresh_pg(postgres_url, 1_000))
            large = asyncio.run(_fresh_pg(postgres_url, 100_000))
        except (OSError, SQLAlchemyError) as exc:
            print(f"dispatcher tick     postgresql skipped: {str(exc).splitlines()[0]}")
        else:
            _report("postgresql", small, large)


def _report(backend: str, small: float, large: float) -> None:
    ratio = large / small
    verdict = "ok" if ratio < 2 else "OVER 2x"
    print(
        f"dispatcher tick     {backend:10} {DUE} due of 1,000: {small * 1000:6.1f} ms"
        f"   of 100,000: {large * 1000:6.1f} ms   ratio {ratio:4.2f}x   [{verdict}]"
    )


async def _fresh_pg(admin_url: str, total: int) -> float:
    import uuid

    from sqlalchemy import text
    from sqlalchemy.engine import make_url
    from sqlalchemy.ext.asyncio import create_async_engine

    name = f"chatgate_bench_{uuid.uuid4().hex[:8]}"
    engine = create_async_engine(admin_url, isolation_level="AUTOCOMMIT")
    async with engine.connect() as conn:
        await conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        return await _tick_seconds(
            make_url(admin_url).set(database=name).render_as_string(False), total
        )
    finally:
        async with engine.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await engine.dispose()


def _latencies(gateway: GatewayProcess, count: int) -> list[float]:
    """Send ``count`` messages one after another; seconds from POST to the reply."""
    samples = []
    for index in range(count):
        started = time.perf_counter()
        body = gateway.post("interactive", f"ping {index}")
        conversation_id = body["conversation_id"]
        url = (
            f"{gateway.url}/api/conversations/{conversation_id}/messages?after={body['message_id']}"
        )
        while True:
            status, reply = http("GET", url)
            assert status == 200
            if any(item["role"] == "assistant" for item in reply["items"]):
                break
            time.sleep(0.002)
        samples.append(time.perf_counter() - started)
    return samples


async def _queue_background(url: str, count: int) -> None:
    database = Database(url)
    store = Store(database)
    try:
        conversation_id = await _seed_conversation(store, "batch")
        for index in range(count):
            await store.background_turn(
                conversation_id,
                user="web:bench",
                prompt=f"background {index}",
                reply_to=None,
            )
    finally:
        await database.dispose()


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99


def bench_isolation() -> None:
    """Interactive reply latency with 2,000 background jobs queued vs none."""
    with FakeModelServer() as server, tempfile.TemporaryDirectory() as workdir:
        url = f"sqlite+aiosqlite:///{Path(workdir) / 'isolation.db'}"
        gateway = GatewayProcess(
            database_url=url,
            workdir=Path(workdir),
            CHATGATE_MODEL="openai/gpt-4o-mini",
            CHATGATE_MODEL_API_BASE=server.base_url,
            CHATGATE_MODEL_API_KEY="sk-bench",
            CHATGATE_LOG_LEVEL="warning",
            CHATGATE_LEASE_SECONDS="30",
            CHATGATE_RATE_BURST="100000",
            CHATGATE_RATE_PER_MINUTE="100000",
        )
        gateway.start(command="run")
        try:
            _latencies(gateway, 10)  # warm up
            idle = _latencies(gateway, REPLIES)
            asyncio.run(_queue_background(url, BACKGROUND_JOBS))
            before = len(server.requests)
            time.sleep(1)
            loaded = _latencies(gateway, REPLIES)
            worked = len(server.requests) - before - REPLIES
            status, _ = http("GET", f"{gateway.url}/healthz")
            assert status == 200
        finally:
            gateway.terminate()
    (p50, p99), (lp50, lp99) = _percentiles(idle), _percentiles(loaded)
    verdict = "ok" if lp99 / p99 < 1.25 else "OVER 1.25x"
    print(
        f"isolation idle      p50 {p50 * 1000:6.1f} ms   p99 {p99 * 1000:6.1f} ms"
        f"   ({REPLIES} replies, one at a time)"
    )
    print(
        f"isolation loaded    p50 {lp50 * 1000:6.1f} ms   p99 {lp99 * 1000:6.1f} ms"
        f"   ratio p50 {lp50 / p50:4.2f}x  p99 {lp99 / p99:4.2f}x   [{verdict}]"
        f"   ({BACKGROUND_JOBS} queued; {worked} background turns ran meanwhile)"
    )

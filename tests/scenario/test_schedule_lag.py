"""Late starts made visible, through the running gateway (issue #28): jittered runs start
inside their window and not before their moment, the lag shows in ``/jobs`` and on
``/metrics``, and ``chatgate doctor`` names what it can see when runs start late."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import func, insert, select

from agent_core.events import utcnow
from agent_core.storage.database import Database
from agent_core.storage.schema import conversations, jobs, schedule_runs, turns
from bench.schedule_burst import seed_due
from tests.fakes.gateway import GatewayProcess, http, run_chatgate
from tests.fakes.model_server import FakeModelServer

RUNS = 40
WINDOW = 4


def _read(url: str, query: Any) -> Any:
    async def read() -> Any:
        database = Database(url)
        try:
            return await database.read(query)
        finally:
            await database.dispose()

    return asyncio.run(read())


def _seed(url: str, slot: datetime) -> None:
    async def seed() -> None:
        database = Database(url)
        try:
            await database.migrate()
            await seed_due(database, RUNS, slot, jitter_seconds=WINDOW, platform="web")
        finally:
            await database.dispose()

    asyncio.run(seed())


def test_jittered_runs_start_in_their_window_and_their_lag_is_shown(
    database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """40 schedules due at one slot with a 4 s window, run by ``chatgate run``'s embedded
    runner: each run is planned inside the window, none starts before its moment or long
    after it, the starts spread over the window; ``/metrics`` counts 40 lags, ``/jobs``
    shows a run's, and doctor finds none late."""
    slot = utcnow() + timedelta(seconds=4)
    _seed(database_url, slot)
    gateway = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        CHATGATE_JOB_CONCURRENCY="8",
        **model_server.settings(),
    )
    try:
        gateway.start(command="run")
        deadline = time.monotonic() + 60
        done = lambda conn: conn.execute(  # noqa: E731
            select(func.count()).select_from(jobs).where(jobs.c.status == "done")
        ).scalar_one()
        while _read(database_url, done) < RUNS:
            assert time.monotonic() < deadline, gateway.log
            time.sleep(0.2)
        runs = _read(
            database_url,
            lambda conn: conn.execute(
                select(schedule_runs.c.due_at, schedule_runs.c.started_at, turns.c.started_at)
                .join(jobs, jobs.c.run_id == schedule_runs.c.id)
                .join(turns, turns.c.id == jobs.c.turn_id)
            ).all(),
        )
        assert len(runs) == RUNS
        for due, claimed, turn_started in runs:
            assert slot <= due <= slot + timedelta(seconds=WINDOW)
            assert due <= claimed <= turn_started
            assert (claimed - due).total_seconds() < 2, (due, claimed)
        starts = sorted(claimed for _due, claimed, _turn in runs)
        assert (starts[-1] - starts[0]).total_seconds() > WINDOW / 2, starts

        status, metrics = http("GET", f"{gateway.url}/metrics")
        assert status == 200
        assert f"chatgate_schedule_lag_seconds_count {float(RUNS)}" in metrics
        assert 'chatgate_schedule_lag_seconds_bucket{le="60.0"} ' + str(float(RUNS)) in metrics

        channel = _read(
            database_url,
            lambda conn: conn.execute(
                select(conversations.c.channel).order_by(conversations.c.channel)
            ).scalar(),
        )
        gateway.post(channel, "/jobs", id="jobs-1")
        deadline = time.monotonic() + 30
        conversation_id = _read(
            database_url,
            lambda conn: conn.execute(
                select(conversations.c.id).where(conversations.c.channel == channel)
            ).scalar_one(),
        )
        while not any("started +" in str(i["text"]) for i in gateway.messages(conversation_id)):
            assert time.monotonic() < deadline, gateway.messages(conversation_id)
            time.sleep(0.1)
        assert not any("late:" in str(i["text"]) for i in gateway.messages(conversation_id))
    finally:
        gateway.stop()
    doctor = run_chatgate("doctor", cwd=tmp_path, CHATGATE_DATABASE_URL=database_url)
    assert f"ok   schedules  {RUNS} runs in the last hour, none late" in doctor.stdout


def test_doctor_names_the_causes_of_late_runs_it_can_see(database_url: str, tmp_path: Path) -> None:
    """A run that started three minutes late and another due five minutes ago, not
    started; no dispatcher or runner has beaten: doctor warns, and names a dispatcher
    that is down, no worker, and the queue's depth."""
    now = utcnow()
    _seed(database_url, now - timedelta(minutes=10))

    def late(conn: Any) -> None:
        rows = conn.execute(select(jobs.c.id)).scalars().all()
        assert rows == []
        ids = [f"sc_{index:08x}" for index in range(2)]
        conn.execute(
            insert(schedule_runs),
            [
                {"schedule_id": ids[0], "scheduled_for": now - timedelta(minutes=10),
                 "due_at": now - timedelta(minutes=10), "created_at": now,
                 "started_at": now - timedelta(minutes=7)},
                {"schedule_id": ids[1], "scheduled_for": now - timedelta(minutes=5),
                 "due_at": now - timedelta(minutes=5), "created_at": now, "started_at": None},
            ],
        )  # fmt: skip
        turn = conn.execute(
            insert(turns).returning(turns.c.id),
            {"conversation_id": conn.execute(select(conversations.c.id)).scalar(),
             "user_id": "web:p00000001", "status": "pending", "attempts": 0,
             "lane": "queued", "prompt": "digest", "created_at": now},
        ).scalar_one()  # fmt: skip
        conn.execute(
            insert(jobs),
            {"kind": "turn", "turn_id": turn, "status": "queued", "attempts": 0,
             "not_before": now - timedelta(minutes=5), "created_at": now,
             "schedule_id": ids[1]},
        )  # fmt: skip

    async def write() -> None:
        database = Database(database_url)
        try:
            await database.write(late)
        finally:
            await database.dispose()

    asyncio.run(write())
    result = run_chatgate("doctor", cwd=tmp_path, CHATGATE_DATABASE_URL=database_url)
    line = next(
        (line for line in result.stdout.splitlines() if " schedules " in line), result.stdout
    )
    assert line.startswith("WARN schedules"), result.stdout
    assert "1 of 1 runs in the last hour started over a minute late (worst 180 s)" in line
    assert "1 runs due over a minute ago have not started" in line
    assert f"{RUNS} schedules' slots passed over a minute ago unfired" in line
    assert "dispatcher down: no dispatcher has ever ticked" in line
    assert "no worker: no job runner has ever run" in line
    assert "queue depth: 1 jobs queued, the oldest due 30" in line
    assert "start `chatgate run`" in result.stdout

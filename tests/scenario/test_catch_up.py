"""Missed runs after downtime (issue #30), through ``chatgate run`` stopped across three
slots and started again: each ``catch_up`` mode does what it says, late runs say how late
they are in the chat, and what a mode drops is in the audit log."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from agent_core.events import InboundMessage, utcnow
from agent_core.records import CATCH_UP
from agent_core.scheduling.service import ScheduleLimits, Schedules
from agent_core.storage.database import Database
from agent_core.storage.schema import audit_log, messages, schedule_runs
from agent_core.storage.store import Store
from tests.fakes.gateway import GatewayProcess
from tests.fakes.model_server import FakeModelServer

EVERY = 3.0
GRACE = 1.0


def _run(database_url: str, work: Any) -> Any:
    async def go() -> Any:
        database = Database(database_url)
        try:
            await database.migrate()
            return await work(database)
        finally:
            await database.dispose()

    return asyncio.run(go())


async def _seed(database: Database) -> tuple[str, dict[str, str], datetime]:
    """A web conversation and three reminders every 3 s, one per catch_up mode."""
    store = Store(database)
    accepted = await store.accept_inbound(
        InboundMessage(platform="web", workspace="local", channel="desk", user="web:local",
                       text="hi", platform_event_id="seed"),
        open_turn=False,
    )  # fmt: skip
    schedules = Schedules(store, limits=ScheduleLimits(min_interval=timedelta(seconds=1)))
    now = utcnow()
    made = {}
    for said, stored in CATCH_UP.items():
        created, _ = await schedules.create(
            conversation_id=accepted.conversation_id, user="web:local", prompt=f"tick {said}",
            spec="every 3s", missed=stored, action="message", now=now,
        )  # fmt: skip
        made[created.id] = said
    return accepted.conversation_id, made, now


def _slots(database_url: str, made: dict[str, str]) -> dict[str, list[datetime]]:
    async def read(database: Database) -> Any:
        return await database.read(
            lambda conn: conn.execute(
                select(schedule_runs.c.schedule_id, schedule_runs.c.scheduled_for).order_by(
                    schedule_runs.c.scheduled_for
                )
            ).all()
        )

    found: dict[str, list[datetime]] = {said: [] for said in made.values()}
    for schedule_id, slot in _run(database_url, read):
        found[made[schedule_id]].append(slot)
    return found


def _at_phase(anchor: datetime, phase: float) -> None:
    """Sleep until ``phase`` seconds after one of the schedules' slots."""
    elapsed = (utcnow() - anchor).total_seconds()
    time.sleep((phase - elapsed) % EVERY)


def test_each_catch_up_mode_after_the_dispatcher_was_down_for_three_slots(
    database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    conversation_id, made, anchor = _run(database_url, _seed)
    gateway = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        CHATGATE_SCHEDULE_TICK_SECONDS="0.5",
        CHATGATE_SCHEDULE_MIN_SECONDS="1",
        CHATGATE_SCHEDULE_GRACE_SECONDS=str(GRACE),
        **model_server.settings(),
    )
    try:
        gateway.start(command="run")
        deadline = time.monotonic() + 30
        while not all(_slots(database_url, made).values()):
            assert time.monotonic() < deadline, gateway.log
            time.sleep(0.2)
        _at_phase(anchor, 1.5)  # the slot before is fired, the next is 1.5 s away
        assert gateway.terminate() == 0
        before = _slots(database_url, made)
        last = max(slot for slots in before.values() for slot in slots)
        time.sleep(3 * EVERY)
        _at_phase(anchor, 2.0)  # three slots passed, the newest 2 s ago (past the grace)
        restarted = utcnow()
        gateway.start(command="run")
        time.sleep(1.5)
        assert gateway.terminate() == 0
    finally:
        gateway.stop()
    after = _slots(database_url, made)
    missed = [last + timedelta(seconds=EVERY * k) for k in (1, 2, 3)]
    assert missed[-1] < restarted - timedelta(seconds=GRACE)
    fired = {said: [s for s in after[said] if s in missed] for said in after}
    assert fired == {"skip": [], "latest": missed[-1:], "all": missed}
    assert model_server.requests == []

    async def notes(database: Database) -> Any:
        return await database.read(
            lambda conn: (
                conn.execute(
                    select(messages.c.text).where(messages.c.conversation_id == conversation_id)
                ).scalars().all(),
                conn.execute(
                    select(audit_log.c.subject, audit_log.c.detail).where(
                        audit_log.c.action == "schedule.missed"
                    )
                ).all(),
            )
        )  # fmt: skip

    texts, traces = _run(database_url, notes)
    labelled = {
        said: [slot for slot in fired[said] if any(
            t.startswith(f"Schedule {sid}:") and f"due at {slot:%Y-%m-%d %H:%M:%S} UTC" in t
            and "late: started" in t for t in texts for sid in made if made[sid] == said)]
        for said in fired
    }  # fmt: skip
    # Each caught-up run said, first, when it was due and how late it started.
    assert labelled == fired
    assert {made[subject]: detail["catch_up"] for subject, detail in traces} == {
        "skip": "skip",
        "latest": "latest",
    }

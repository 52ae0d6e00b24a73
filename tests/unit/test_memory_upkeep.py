"""The nightly memory review through the job queue: one slot planned once however many
dispatchers tick, repeats merged without the model, contradicted facts superseded by the
model's word (the real litellm against the fake model), and nothing changed by an answer
that is not the JSON asked for."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from agent_core.jobs import JobPolicy, JobRunner
from agent_core.loop import TurnRunner
from agent_core.memory_upkeep import REVIEW_ASK, MemoryUpkeep, parse_facts
from agent_core.model import ModelReply
from agent_core.scheduling import ScheduleLimits, Schedules
from agent_core.settings import load_settings
from agent_core.storage.database import Database
from agent_core.storage.schema import jobs, memories, model_usage
from agent_core.storage.store import Store
from agent_core.testing import RecordingJobQueue, RecordingOutbound
from tests.fakes.model_server import FakeModelServer
from tests.unit.test_memory import _conversation
from workers.dispatcher import ScheduleDispatcher, latest_slot
from workers.runtime import build_model

NIGHTLY = "0 3 * * *"
ALICE = "web:alice"


def _dispatcher(store: Store, queue: RecordingJobQueue) -> ScheduleDispatcher:
    schedules = Schedules(store, limits=ScheduleLimits())
    return ScheduleDispatcher(store, schedules, queue, maintenance=NIGHTLY)


def _job_runner(store: Store, server: FakeModelServer) -> JobRunner:
    model = build_model(load_settings(server.settings()))
    outbound = RecordingOutbound()
    runner = TurnRunner(store, model=model, outbound=outbound, system_prompt="s")
    return JobRunner(
        store,
        runner,
        outbound,
        policy=JobPolicy(max_attempts=2),
        upkeep=MemoryUpkeep(store, model),
    )


def _obsolete_where(word: str) -> dict[str, object]:
    """A review hook: the older facts mentioning ``word`` are obsolete."""

    def answer(text: str) -> str:
        ids = [
            int(i) for i, fact in re.findall(r"- id (\d+) \([^)]*\): (.*)", text) if word in fact
        ]
        return json.dumps({"obsolete": ids})

    return {REVIEW_ASK: answer}


async def _rows(database: Database, query: Any) -> list[Any]:
    return await database.read(lambda conn: list(conn.execute(query).all()))


async def _live(database: Database) -> dict[int, str]:
    live = memories.c.superseded_by.is_(None) & memories.c.forgotten_at.is_(None)
    rows = await _rows(database, select(memories.c.id, memories.c.fact).where(live))
    return {int(r.id): r.fact for r in rows}


def test_the_latest_slot_is_at_or_before_now() -> None:
    now = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    assert latest_slot(NIGHTLY, now) == datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
    assert latest_slot(NIGHTLY, now.replace(hour=3)) == now.replace(hour=3)
    assert latest_slot(NIGHTLY, now.replace(hour=2)) == datetime(2026, 11, 29, 3, 0, tzinfo=UTC)


async def test_each_nightly_slot_queues_one_job_per_person_however_many_beats_tick(
    database: Database, database_url: str
) -> None:
    store = Store(database)
    other = Database(database_url)
    try:
        beats = [
            (_dispatcher(store, RecordingJobQueue()), store),
            (_dispatcher(Store(other), RecordingJobQueue()), Store(other)),
        ]
        conversation = await _conversation(store, "one", ALICE)
        bobs = await _conversation(store, "two", "web:bob")
        for user, where in ((ALICE, conversation), ("web:bob", bobs)):
            await store.remember(
                user=user, conversation_id=where, scope="user", fact="x", about=None, source="t"
            )
        first_boot = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
        for dispatcher, _ in beats:
            assert (await dispatcher.tick(first_boot)).jobs == 0  # counting starts now
        next_night = datetime(2026, 12, 1, 3, 0, 30, tzinfo=UTC)
        created = [(await d.tick(next_night)).jobs for d, _ in beats]
        assert sorted(created) == [0, 2]
        again = [(await d.tick(next_night.replace(hour=9))).jobs for d, _ in beats]
        assert again == [0, 0]
        rows = await _rows(database, select(jobs.c.kind, jobs.c.user_id, jobs.c.turn_id))
        expected = [("maintain", ALICE, None), ("maintain", "web:bob", None)]
        assert sorted(tuple(r) for r in rows) == expected
    finally:
        await other.dispose()


async def test_maintenance_merges_repeats_and_supersedes_contradicted_facts(
    database: Database, model_server: FakeModelServer
) -> None:
    store = Store(database)
    conversation = await _conversation(store, "one", ALICE)
    facts = [
        ("Alice lives in Berlin.", "home"),
        ("Prefers tea over coffee.", "drinks"),
        ("Works on the billing service.", "work"),
        ("prefers TEA over coffee", "tea"),
        ("Alice moved to Lisbon; she lives in Lisbon now.", "city"),
    ]
    ids = []
    for fact, about in facts:
        memory_id, superseded = await store.remember(
            user=ALICE,
            conversation_id=conversation,
            scope="user",
            fact=fact,
            about=about,
            source="test",
        )
        assert superseded == 0  # every `about` differs: nothing is superseded at write time
        ids.append(memory_id)
    model_server.background = _obsolete_where("Berlin")
    queue = RecordingJobQueue()
    dispatcher = _dispatcher(store, queue)
    await dispatcher.tick(datetime(2026, 11, 30, 10, 0, tzinfo=UTC))
    await dispatcher.tick(datetime(2026, 12, 1, 3, 1, tzinfo=UTC))
    [job_id] = queue.jobs
    job = await _job_runner(store, model_server).run(job_id, owner="worker-1")
    assert job is not None

    live = await _live(database)
    _berlin, _tea, billing, tea_again, lisbon = ids
    assert set(live) == {billing, tea_again, lisbon}
    found = await store.recall(user=ALICE, conversation_id=conversation, query="where lives")
    assert [m.fact for m in found] == ["Alice moved to Lisbon; she lives in Lisbon now."]
    reviews = [
        r for r in model_server.requests if r["messages"][0]["content"].startswith(REVIEW_ASK)
    ]
    # The repeat needed no model call; "lives" (Berlin, Lisbon) did.
    assert any("Alice lives in Berlin." in r["messages"][-1]["content"] for r in reviews)
    assert not any("Prefers tea" in r["messages"][-1]["content"] for r in reviews)
    [status] = await _rows(database, select(jobs.c.status).where(jobs.c.id == job_id))
    assert tuple(status) == ("done",)
    spent = await _rows(database, select(model_usage.c.user_id, model_usage.c.turn_id))
    assert spent
    assert all(tuple(row) == (ALICE, None) for row in spent)

    # Reviewed facts are not looked at again: the next night asks the model nothing.
    asked = len(model_server.requests)
    await dispatcher.tick(datetime(2026, 12, 2, 3, 1, tzinfo=UTC))
    assert queue.jobs == [job_id]
    assert len(model_server.requests) == asked


async def test_an_answer_that_is_not_the_json_asked_for_changes_nothing(
    database: Database, model_server: FakeModelServer
) -> None:
    store = Store(database)
    conversation = await _conversation(store, "one", ALICE)
    for fact in ("Alice lives in Berlin.", "Alice lives in Lisbon now."):
        await store.remember(
            user=ALICE,
            conversation_id=conversation,
            scope="user",
            fact=fact,
            about=None,
            source="t",
        )
    model_server.background = {REVIEW_ASK: lambda text: "Sure! The first one is outdated."}
    model = build_model(load_settings(model_server.settings()))
    assert model is not None
    assert await MemoryUpkeep(store, model).maintain(ALICE, model) == 0
    assert len(await _live(database)) == 2


def test_extraction_answers_are_read_strictly() -> None:
    def facts(text: str) -> list[tuple[str, str | None]] | None:
        return parse_facts(ModelReply(text=text, model="m"))

    assert facts('```json\n{"facts": []}\n```') == []
    assert facts('{"facts": [{"fact": " Likes Go. ", "about": "Languages"}]}') == [
        ("Likes Go.", "languages")
    ]
    assert facts('{"facts": [{"fact": "Likes Go."}]}') == [("Likes Go.", None)]
    assert facts('{"facts": "none"}') is None
    assert facts('{"facts": [{"about": "x"}]}') is None
    assert facts("I found these facts: ...") is None

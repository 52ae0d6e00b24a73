"""The nightly memory review through the job queue: one slot planned once however many
dispatchers tick, repeats merged without the model, contradicted facts superseded by the
model's word (the real litellm against the fake model), and nothing changed by an answer
that is not the JSON asked for."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select

from agent_core.events import InboundMessage
from agent_core.jobs import JobPolicy, JobRunner
from agent_core.memory_upkeep import EXTRACT_ASK, REVIEW_ASK, MemoryUpkeep, parse_facts
from agent_core.model import Model, ModelReply
from agent_core.scheduling.service import ScheduleLimits, Schedules
from agent_core.settings_loader import load_settings
from agent_core.storage.database import Database
from agent_core.storage.schema import jobs, memories, model_usage
from agent_core.storage.store import Store
from agent_core.testing import RecordingJobQueue, RecordingOutbound, turn_runner
from tests.fakes.model_server import FakeModelServer
from tests.unit.test_memory import _conversation
from workers.dispatcher import ScheduleDispatcher, latest_slot
from workers.models import build_model

NIGHTLY = "0 3 * * *"
ALICE = "web:alice"


def _dispatcher(store: Store, queue: RecordingJobQueue) -> ScheduleDispatcher:
    schedules = Schedules(store, limits=ScheduleLimits())
    return ScheduleDispatcher(store, schedules, queue, maintenance=NIGHTLY)


@pytest.fixture
async def model(model_server: FakeModelServer) -> AsyncIterator[Model]:
    """The configured litellm model, against the fake server; closed after the test."""
    built = build_model(load_settings(model_server.settings()))
    assert built is not None
    yield built
    await built.aclose()


def _job_runner(store: Store, model: Model) -> JobRunner:
    outbound = RecordingOutbound()
    runner = turn_runner(store, model=model, outbound=outbound, system_prompt="s")
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
    database: Database, model_server: FakeModelServer, model: Model
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
    # The conversation's own fact is not the person's: the review leaves it alone.
    shared, _ = await store.remember(
        user=ALICE,
        conversation_id=conversation,
        scope="conversation",
        fact="The team offsite lives in Berlin this year.",
        about="offsite",
        source="test",
    )
    model_server.background = _obsolete_where("Berlin")
    queue = RecordingJobQueue()
    dispatcher = _dispatcher(store, queue)
    await dispatcher.tick(datetime(2026, 11, 30, 10, 0, tzinfo=UTC))
    await dispatcher.tick(datetime(2026, 12, 1, 3, 1, tzinfo=UTC))
    [job_id] = queue.jobs
    job = await _job_runner(store, model).run(job_id, owner="worker-1")
    assert job is not None

    live = await _live(database)
    _berlin, _tea, billing, tea_again, lisbon = ids
    assert set(live) == {billing, tea_again, lisbon, shared}
    found = await store.recall(user=ALICE, conversation_id=conversation, query="where lives")
    mine = [m.fact for m in found if m.scope == "user"]
    assert mine == ["Alice moved to Lisbon; she lives in Lisbon now."]
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

    # Reviewed facts are not looked at again: the next night queues nothing for Alice.
    await dispatcher.tick(datetime(2026, 12, 2, 3, 1, tzinfo=UTC))
    assert queue.jobs == [job_id]
    assert await _job_runner(store, model).run(None, owner="worker-1") is None


async def test_an_answer_that_is_not_the_json_asked_for_changes_nothing(
    database: Database, model_server: FakeModelServer, model: Model
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
    upkeep = MemoryUpkeep(store, model)
    assert await upkeep.maintain(ALICE, model) == 0
    assert len(await _live(database)) == 2
    # The newer fact is not reviewed (the older one, with nothing before it, is): the next
    # review asks again, and a usable answer then counts.
    [waiting] = await store.unreviewed_facts(ALICE, limit=10)
    assert waiting.fact == "Alice lives in Lisbon now."
    model_server.background = _obsolete_where("Berlin")
    assert await upkeep.maintain(ALICE, model) == 1
    assert list((await _live(database)).values()) == ["Alice lives in Lisbon now."]
    assert await store.unreviewed_facts(ALICE, limit=10) == []


async def test_a_turns_facts_are_stored_once_by_whoever_still_holds_the_job(
    database: Database, model_server: FakeModelServer, model: Model
) -> None:
    """The facts are stored in the transaction that closes the job, only by its owner: a
    runner whose lease passed to another stores nothing, and the job is not run again."""
    store = Store(database)
    model_server.background = {
        EXTRACT_ASK: lambda text: json.dumps({"facts": [{"fact": "Uses Rust.", "about": "lang"}]})
    }
    accepted = await store.accept_inbound(
        InboundMessage(
            platform="web",
            workspace="local",
            channel="one",
            user=ALICE,
            text="I write everything in Rust",
            platform_event_id="e1",
        )
    )
    assert accepted.turn_id is not None
    turn = await store.begin_next_turn(accepted.conversation_id)
    assert turn is not None
    await store.record_reply_intent(
        turn, 1, role="assistant", text="Nice.", delivery_key="k", extract=True
    )
    [(job_id,)] = await _rows(database, select(jobs.c.id).where(jobs.c.kind == "extract"))
    first = await store.claim_job(job_id, owner="w1", ttl=0.01)
    assert first is not None
    await asyncio.sleep(0.05)  # w1 stalls past its lease; w2 takes the job over
    second = await store.claim_job(job_id, owner="w2", ttl=30)
    assert second is not None
    upkeep = MemoryUpkeep(store, model)
    assert await upkeep.extract(job_id, turn.id, model, owner="w2") == 1
    assert await upkeep.extract(job_id, turn.id, model, owner="w1") == 0
    assert list((await _live(database)).values()) == ["Uses Rust."]
    assert await store.claim_job(job_id, owner="w3", ttl=30) is None  # done
    spent = await _rows(database, select(model_usage.c.turn_id))
    assert [tuple(r) for r in spent] == [(turn.id,)]


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

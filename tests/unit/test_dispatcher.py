"""The schedule dispatcher over a real database: each slot fires once, whoever ticks."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from agent_core.errors import NotAllowedToChange, ScheduleNotFound
from agent_core.events import InboundMessage
from agent_core.scheduling.recurrence import ScheduleError
from agent_core.scheduling.service import ScheduleLimits, Schedules
from agent_core.storage.database import Database
from agent_core.storage.schema import jobs, schedule_runs, turns
from agent_core.storage.store import Store
from agent_core.testing import RecordingJobQueue
from workers.dispatcher import ScheduleDispatcher

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


async def _conversation(store: Store, name: str = "ops") -> str:
    accepted = await store.accept_inbound(
        InboundMessage(
            platform="web",
            workspace="local",
            channel=name,
            user="web:alice",
            text="hello",
            platform_event_id=f"seed-{name}",
        ),
        open_turn=False,
    )
    return accepted.conversation_id


def _schedules(store: Store, **limits: object) -> Schedules:
    return Schedules(store, limits=ScheduleLimits(**limits), admins=["web:admin"])  # type: ignore[arg-type]


async def _count(database: Database, table: object) -> int:
    return await database.read(
        lambda conn: int(conn.execute(select(func.count()).select_from(table)).scalar_one())  # type: ignore[arg-type]
    )


async def test_two_dispatchers_fire_each_of_100_due_slots_once(
    database: Database, database_url: str
) -> None:
    store = Store(database)
    schedules = _schedules(store, per_conversation=1000)
    conversation_id = await _conversation(store)
    for index in range(100):
        await schedules.create(
            conversation_id=conversation_id,
            user="web:alice",
            prompt=f"task {index}",
            spec="every 1h",
            now=T0 - timedelta(hours=1),
            creation_key=f"k{index}",
        )
    # A second process: its own connections to the same database.
    other = Database(database_url)
    try:
        other_store = Store(other)
        first, second = RecordingJobQueue(), RecordingJobQueue()
        a = ScheduleDispatcher(store, schedules, first, batch=7)
        b = ScheduleDispatcher(other_store, _schedules(other_store), second, batch=7)
        now = T0 + timedelta(seconds=1)
        ticks = await asyncio.gather(*(d.tick(now) for d in (a, b, a, b)))
    finally:
        await other.dispose()
    assert sum(t.jobs for t in ticks) == 100
    assert sorted(first.jobs + second.jobs) == sorted(set(first.jobs + second.jobs))
    assert await _count(database, schedule_runs) == 100
    assert await _count(database, jobs) == 100
    slots = await database.read(
        lambda conn: conn.execute(select(schedule_runs.c.scheduled_for).distinct()).scalars().all()
    )
    assert slots == [T0]
    # Every schedule moved on to its next hour.
    listed = await store.schedules_for(conversation_id)
    assert {s.next_run_at for s in listed} == {T0 + timedelta(hours=1)}
    # Ticking again at the same time fires nothing more.
    again = await ScheduleDispatcher(store, schedules, first).tick(now)
    assert again.jobs == 0


async def test_a_paused_schedule_does_not_fire_and_resumes_from_now(database: Database) -> None:
    store = Store(database)
    schedules = _schedules(store)
    conversation_id = await _conversation(store)
    created, new = await schedules.create(
        conversation_id=conversation_id,
        user="web:alice",
        prompt="report",
        spec="every 10m",
        now=T0,
    )
    assert new
    assert created.next_run_at == T0 + timedelta(minutes=10)
    paused = await schedules.change(created.id, "pause", user="web:alice")
    assert paused.status == "paused"
    queue = RecordingJobQueue()
    dispatcher = ScheduleDispatcher(store, schedules, queue)
    assert (await dispatcher.tick(T0 + timedelta(hours=2))).jobs == 0
    resumed = await schedules.change(
        created.id, "resume", user="web:alice", now=T0 + timedelta(hours=2, minutes=1)
    )
    assert resumed.status == "active"
    assert resumed.next_run_at == T0 + timedelta(hours=2, minutes=10)
    assert (await dispatcher.tick(T0 + timedelta(hours=2, minutes=10))).jobs == 1
    deleted = await schedules.change(created.id, "delete", user="web:admin")
    assert deleted.status == "deleted"
    assert (await dispatcher.tick(T0 + timedelta(hours=5))).jobs == 0
    assert await store.schedules_for(conversation_id) == []


async def test_only_the_creator_or_an_admin_may_change_a_schedule(database: Database) -> None:
    store = Store(database)
    schedules = _schedules(store)
    conversation_id = await _conversation(store)
    other_conversation = await _conversation(store, "elsewhere")
    created, _ = await schedules.create(
        conversation_id=conversation_id, user="web:alice", prompt="x", spec="every 1h", now=T0
    )
    with pytest.raises(NotAllowedToChange):
        await schedules.change(created.id, "delete", user="web:mallory")
    with pytest.raises(ScheduleNotFound):
        await schedules.change(
            created.id, "delete", user="web:alice", conversation_id=other_conversation
        )
    with pytest.raises(ScheduleNotFound):
        await schedules.change("sc_00000000", "pause", user="web:alice")
    assert (await schedules.change(created.id, "pause", user="web:admin")).status == "paused"


async def test_creation_is_idempotent_and_limited(database: Database) -> None:
    store = Store(database)
    schedules = _schedules(store, per_conversation=2, min_interval=timedelta(minutes=5))
    conversation_id = await _conversation(store)
    args = {"conversation_id": conversation_id, "user": "web:alice", "now": T0}
    one, new = await schedules.create(prompt="a", spec="every 1h", creation_key="7:3", **args)  # type: ignore[arg-type]
    again, new_again = await schedules.create(
        prompt="a",
        spec="every 1h",
        creation_key="7:3",
        **args,  # type: ignore[arg-type]
    )
    assert new
    assert not new_again
    assert again.id == one.id
    with pytest.raises(ScheduleError, match="minimum"):
        await schedules.create(prompt="b", spec="every 1m", **args)  # type: ignore[arg-type]
    with pytest.raises(ScheduleError, match="empty"):
        await schedules.create(prompt="  ", spec="every 1h", **args)  # type: ignore[arg-type]
    await schedules.create(prompt="b", spec="0 9 * * *", **args)  # type: ignore[arg-type]
    with pytest.raises(ScheduleError, match="schedules_per_conversation"):
        await schedules.create(prompt="c", spec="0 10 * * *", **args)  # type: ignore[arg-type]


async def test_a_one_shot_fires_once_then_is_done(database: Database) -> None:
    store = Store(database)
    schedules = _schedules(store)
    conversation_id = await _conversation(store)
    created, _ = await schedules.create(
        conversation_id=conversation_id,
        user="web:alice",
        prompt="remind me",
        spec="in 2h",
        now=T0,
    )
    assert created.kind == "once"
    queue = RecordingJobQueue()
    dispatcher = ScheduleDispatcher(store, schedules, queue)
    assert (await dispatcher.tick(T0 + timedelta(hours=1))).jobs == 0
    assert (await dispatcher.tick(T0 + timedelta(hours=2))).jobs == 1
    assert (await dispatcher.tick(T0 + timedelta(hours=3))).jobs == 0
    done = await store.schedule(created.id)
    assert done is not None
    assert done.status == "done"
    assert done.next_run_at is None
    # The run is a queued turn of the conversation, asking the schedule's prompt.
    turn = await store.load_turn(
        await database.read(lambda conn: int(conn.execute(select(turns.c.id)).scalar_one()))
    )
    assert turn.trigger_text == "remind me"
    assert turn.user == "web:alice"
    assert turn.status == "pending"


async def test_missed_runs_follow_the_schedule_policy(database: Database) -> None:
    store = Store(database)
    schedules = _schedules(store, grace=timedelta(minutes=1), catch_up_max=3)
    conversation_id = await _conversation(store)
    for missed in ("skip", "run_once", "catch_up"):
        await schedules.create(
            conversation_id=conversation_id,
            user="web:alice",
            prompt=missed,
            spec="every 1h",
            missed=missed,  # type: ignore[arg-type]
            now=T0,
        )
    queue = RecordingJobQueue()
    # Down for ten hours and a half: ten slots passed, none on time.
    tick = await ScheduleDispatcher(store, schedules, queue).tick(
        T0 + timedelta(hours=10, minutes=30)
    )
    by_prompt = await database.read(
        lambda conn: dict(
            conn.execute(select(turns.c.prompt, func.count()).group_by(turns.c.prompt)).all()  # type: ignore[arg-type]
        )
    )
    assert by_prompt == {"run_once": 1, "catch_up": 3}
    assert tick.jobs == 4
    listed = await store.schedules_for(conversation_id)
    assert {s.next_run_at for s in listed} == {T0 + timedelta(hours=11)}


async def test_a_channel_lists_the_schedules_of_its_threads_and_a_thread_only_its_own(
    database: Database,
) -> None:
    store = Store(database)
    schedules = _schedules(store)
    ids = {}
    for name, thread in (("channel", None), ("thread-a", "1.1"), ("thread-b", "2.2")):
        accepted = await store.accept_inbound(
            InboundMessage(
                platform="slack",
                workspace="T1",
                channel="C1",
                thread=thread,
                user="slack:U1",
                text="hi",
                platform_event_id=f"seed-{name}",
            ),
            open_turn=False,
        )
        ids[name] = accepted.conversation_id
    created, _ = await schedules.create(
        conversation_id=ids["thread-a"], user="slack:U1", prompt="p", spec="every 1h", now=T0
    )
    assert [s.id for s in await store.schedules_for(ids["channel"])] == [created.id]
    assert [s.id for s in await store.schedules_for(ids["thread-a"])] == [created.id]
    assert await store.schedules_for(ids["thread-b"]) == []
    # From the channel it may be changed; from a sibling thread it is not found.
    with pytest.raises(ScheduleNotFound):
        await schedules.change(
            created.id, "pause", user="slack:U1", conversation_id=ids["thread-b"]
        )
    paused = await schedules.change(
        created.id, "pause", user="slack:U1", conversation_id=ids["channel"]
    )
    assert paused.status == "paused"


async def test_a_job_stranded_with_a_worker_is_sent_again_only_when_the_broker_is_idle(
    database: Database,
) -> None:
    store = Store(database)
    schedules = _schedules(store)
    conversation_id = await _conversation(store)
    await schedules.create(
        conversation_id=conversation_id, user="web:alice", prompt="p", spec="every 1h", now=T0
    )
    waiting: list[int | Exception] = [1]
    asked = 0

    async def backlog() -> int:
        nonlocal asked
        asked += 1
        if isinstance(waiting[0], Exception):
            raise waiting[0]
        return waiting[0]

    queue = RecordingJobQueue()
    dispatcher = ScheduleDispatcher(
        store,
        schedules,
        queue,
        resend_after=timedelta(hours=1),
        backlog=backlog,
        stranded_after=timedelta(seconds=30),
    )
    fired = await dispatcher.tick(T0 + timedelta(hours=1))
    assert (fired.jobs, fired.resent) == (1, 0)
    [job] = queue.jobs
    await store.jobs_sent([job], now=T0 + timedelta(hours=1))
    asked = 0
    # Sent 10 s ago: the broker is not even asked.
    assert (await dispatcher.tick(T0 + timedelta(hours=1, seconds=10))).resent == 0
    assert asked == 0
    # Messages wait in the broker (workers are busy): a minute queued is not stranded.
    # The broker's length cannot be read: nothing is assumed.
    for length in (3, ConnectionError("redis down")):
        waiting[0] = length
        assert (await dispatcher.tick(T0 + timedelta(hours=1, seconds=60))).resent == 0
    assert asked == 2
    # Nothing waits in the broker and the job has sat queued for 40 s: a worker took it
    # and never started it. Sent again, and not again while the new send is fresh.
    waiting[0] = 0
    tick = await dispatcher.tick(T0 + timedelta(hours=1, seconds=40))
    assert tick.resent == 1
    assert queue.jobs == [job, job]
    await store.jobs_sent([job], now=T0 + timedelta(hours=1, seconds=40))
    assert (await dispatcher.tick(T0 + timedelta(hours=1, seconds=50))).resent == 0


async def test_a_dead_workers_job_whose_resend_was_lost_too_is_sent_again(
    database: Database,
) -> None:
    """Found by the chaos run: a worker dies mid-job (the lease expires), the job is sent
    again, and that message dies with another worker before anyone claims it. Once the
    broker is idle and the resend is stranded_after old, it is sent once more (before,
    it waited for the broker's visibility timeout, half an hour)."""
    store = Store(database)
    schedules = _schedules(store)
    conversation_id = await _conversation(store)
    await schedules.create(
        conversation_id=conversation_id, user="web:alice", prompt="p", spec="every 1h", now=T0
    )
    waiting = [0]

    async def backlog() -> int:
        return waiting[0]

    queue = RecordingJobQueue()
    dispatcher = ScheduleDispatcher(
        store,
        schedules,
        queue,
        resend_after=timedelta(hours=1),
        backlog=backlog,
        stranded_after=timedelta(seconds=30),
    )
    start = T0 + timedelta(hours=1)
    await dispatcher.tick(start)
    [job] = queue.jobs
    died = start + timedelta(seconds=20)
    await database.write(
        lambda conn: conn.execute(
            jobs.update()
            .where(jobs.c.id == job)
            .values(status="running", lease_owner="dead", lease_expires_at=died)
        )
    )
    # The lease ran out: sent again at once, however busy the broker.
    waiting[0] = 5
    assert (await dispatcher.tick(died + timedelta(seconds=1))).resent == 1
    await store.jobs_sent([job], now=died + timedelta(seconds=1))
    # That message was lost too. While it may still be waiting in a busy broker, nothing.
    assert (await dispatcher.tick(died + timedelta(seconds=60))).resent == 0
    # The broker is idle and nobody claimed the job for 30 s and more: sent again.
    waiting[0] = 0
    assert (await dispatcher.tick(died + timedelta(seconds=60))).resent == 1
    assert queue.jobs == [job, job, job]


async def test_two_dispatchers_split_a_burst_and_fire_every_slot_once(
    database: Database, database_url: str
) -> None:
    """10,000 schedules on PostgreSQL (2,000 on SQLite), each to a conversation of its
    own, due in the same minute; two dispatchers (each with its own connections) tick at
    once in batches of 200: every slot fires once, with one turn and one job, and on
    PostgreSQL both take part (SKIP LOCKED hands them different rows; SQLite has one
    writer at a time). ``make bench`` times it against one dispatcher."""
    from sqlalchemy import insert

    from agent_core.events import utcnow
    from agent_core.storage.schema import conversations, schedule_targets, schedules

    count = 10_000 if database.dialect == "postgresql" else 2_000
    now = utcnow()
    people = [
        {"id": f"c{index:031d}", "platform": "slack", "workspace": "T1",
         "channel": f"D{index}", "thread": "", "created_at": now, "updated_at": now}
        for index in range(count)
    ]  # fmt: skip
    rows = [
        {"id": f"sc_{index:08x}", "conversation_id": people[index]["id"],
         "created_by": f"slack:U{index}", "prompt": "digest", "kind": "cron",
         "spec": "0 9 * * *", "timezone": "UTC", "anchor": None, "missed": "run_once",
         "status": "active", "next_run_at": T0, "failures": 0, "created_at": now,
         "updated_at": now}
        for index in range(count)
    ]  # fmt: skip
    await database.write(
        lambda conn: (
            conn.execute(insert(conversations), people),
            conn.execute(insert(schedules), rows),
            conn.execute(
                insert(schedule_targets),
                [{"schedule_id": r["id"], "conversation_id": r["conversation_id"]} for r in rows],
            ),
        )
    )
    store = Store(database)
    other = Database(database_url)
    try:
        other_store = Store(other)
        first, second = RecordingJobQueue(), RecordingJobQueue()
        a = ScheduleDispatcher(store, _schedules(store), first, batch=200)
        b = ScheduleDispatcher(other_store, _schedules(other_store), second, batch=200)
        ticks = await asyncio.gather(a.tick(T0 + timedelta(seconds=1)),
                                     b.tick(T0 + timedelta(seconds=1)))  # fmt: skip
    finally:
        await other.dispose()
    assert sum(t.jobs for t in ticks) == count
    assert len(set(first.jobs) | set(second.jobs)) == count == len(first.jobs + second.jobs)
    assert await _count(database, schedule_runs) == count
    assert await _count(database, jobs) == count
    assert await _count(database, turns) == count
    delivered = await database.read(
        lambda conn: conn.execute(
            select(func.count(func.distinct(turns.c.conversation_id)))
        ).scalar_one()
    )
    assert delivered == count  # each to its own person, none twice
    if database.dialect == "postgresql":
        assert first.jobs
        assert second.jobs

"""Late starts made visible and jitter spread (issue #28), over a real database: each run
records its planned start and the start of its turn; a schedule with a jitter window has
its runs planned evenly across the window and started no sooner."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from agent_core.events import utcnow
from agent_core.journaled import lag_note
from agent_core.records import StartedRun
from agent_core.scheduling.jitter import parse_jitter, start_of
from agent_core.scheduling.recurrence import ScheduleError
from agent_core.storage.database import Database
from agent_core.storage.schema import jobs, schedule_runs
from agent_core.storage.store import Store
from agent_core.testing import RecordingJobQueue
from bench.schedule_burst import seed_due
from gateway.metrics import Metrics
from tests.unit.test_dispatcher import T0, _conversation, _schedules
from workers.dispatcher import ScheduleDispatcher

WINDOW = 60


async def _runs(database: Database) -> list[tuple[object, ...]]:
    return await database.read(
        lambda conn: [
            tuple(row)
            for row in conn.execute(
                select(
                    schedule_runs.c.scheduled_for,
                    schedule_runs.c.due_at,
                    schedule_runs.c.started_at,
                    jobs.c.not_before,
                    jobs.c.id,
                ).join(jobs, jobs.c.run_id == schedule_runs.c.id)
            ).all()
        ]
    )


async def test_a_thousand_jittered_runs_are_planned_evenly_across_their_window(
    database: Database,
) -> None:
    """1,000 schedules due at one slot with a 60 s window: every run is planned inside the
    window, no 10 s bucket holds more than twice its share, and the jobs wait for their
    moment: the tick hands on only those already due, and a claim takes none early."""
    # The slot was 20 s ago: about a third of the window has passed.
    slot = utcnow() - timedelta(seconds=20)
    await seed_due(database, 1_000, slot, jitter_seconds=WINDOW, platform="web")
    store = Store(database)
    queue = RecordingJobQueue()
    tick_at = utcnow()
    await ScheduleDispatcher(store, _schedules(store), queue).tick(tick_at)
    runs = await _runs(database)
    assert len(runs) == 1_000
    offsets = [(due - slot).total_seconds() for _slot, due, _s, _nb, _id in runs]  # type: ignore[operator]
    assert all(0 <= offset <= WINDOW for offset in offsets)
    buckets = Counter(int(offset // 10) for offset in offsets)
    share = 1_000 / (WINDOW / 10)
    assert set(buckets) <= set(range(6))
    assert max(buckets.values()) <= 2 * share, buckets
    assert min(buckets.values()) >= share / 2, buckets
    # Each job waits until its run's moment; the tick handed on only the ones due by then.
    assert all(not_before == max(due, tick_at) for _slot, due, _s, not_before, _id in runs)  # type: ignore[type-var]
    ready = {job_id for _slot, due, _s, _nb, job_id in runs if due <= tick_at}  # type: ignore[operator]
    assert set(queue.jobs) == ready
    assert 150 < len(ready) < 500
    before_claim = utcnow()
    claimed = {job.id for job in await store.claim_jobs(1_000, owner="runner-1", ttl=30)}
    assert ready <= claimed
    after = await _runs(database)
    for _slot, due, began, _nb, job_id in after:
        if job_id in claimed:  # started at its moment or after, and recorded
            assert began is not None
            assert began >= due, (due, began)  # type: ignore[operator]
        else:  # its moment had not come
            assert began is None
            assert due > before_claim  # type: ignore[operator]


async def test_the_same_slot_is_planned_at_the_same_moment_by_anyone() -> None:
    """The moment is a function of the schedule and the slot: a dispatcher that restarts
    after a crash, or another one, plans the same start; other slots move."""
    first = start_of("sc_0000abcd", T0, 300)
    assert first == start_of("sc_0000abcd", T0, 300)
    assert T0 <= first <= T0 + timedelta(seconds=300)
    assert start_of("sc_0000abcd", T0 + timedelta(days=1), 300) - timedelta(days=1) != first
    assert start_of("sc_0000abcd", T0, 0) == T0


@pytest.mark.parametrize(
    ("typed", "seconds"),
    [("5m", 300), ("within 90 seconds", 90), ("1h", 3600), ("0", 0), (None, 0)],
)
def test_jitter_is_typed_as_a_window(typed: str | None, seconds: int) -> None:
    assert parse_jitter(typed) == seconds


@pytest.mark.parametrize("typed", ["2h", "soon", "5 parsecs", "-5m", "\uff15m", "\u0665m"])
def test_a_bad_jitter_says_what_is_wrong(typed: str) -> None:
    with pytest.raises(ScheduleError):
        parse_jitter(typed)


async def test_jitter_must_be_shorter_than_the_time_between_runs(database: Database) -> None:
    store = Store(database)
    schedules = _schedules(store)
    conversation_id = await _conversation(store)
    with pytest.raises(ScheduleError, match="not shorter than the 1h between runs"):
        await schedules.create(conversation_id=conversation_id, user="web:alice",
                               prompt="digest", spec="every 1h", jitter="1h", now=T0)  # fmt: skip
    created, _ = await schedules.create(
        conversation_id=conversation_id,
        user="web:alice",
        prompt="digest",
        spec="0 9 * * *",
        jitter="5m",
        now=T0,
    )
    assert created.jitter_seconds == 300
    assert "(within 5m)" in schedules.describe(created)


async def test_a_run_records_its_slot_and_start_and_one_over_a_minute_is_late(
    database: Database,
) -> None:
    """Two schedules' slots fire; one run's job is claimed at once, the other's 90 s after
    its slot: both show their lag in the listing, only the second is marked late, and a
    second claim of the same run (a retry) leaves its start as it was."""
    store = Store(database)
    schedules = _schedules(store)
    conversation_id = await _conversation(store)
    now = utcnow()
    made = [
        (await schedules.create(conversation_id=conversation_id, user="web:alice",
                                prompt=prompt, spec="every 1h", now=now))[0]
        for prompt in ("prompt", "slow")
    ]  # fmt: skip
    slow_id = made[1].id
    slot = now + timedelta(hours=1)
    await ScheduleDispatcher(store, schedules, RecordingJobQueue()).tick(slot)
    # Put the slots in the past (as if the tick had been at the slot): one just now, the
    # other 90 s before the claim.
    await database.write(
        lambda conn: conn.execute(update(jobs).values(not_before=utcnow() - timedelta(hours=2)))
    )
    await database.write(
        lambda conn: (
            conn.execute(update(schedule_runs).values(due_at=utcnow() - timedelta(seconds=1))),
            conn.execute(
                update(schedule_runs)
                .where(schedule_runs.c.schedule_id == slow_id)
                .values(due_at=utcnow() - timedelta(seconds=90))
            ),
        )
    )
    claimed = await store.claim_jobs(10, owner="runner-1", ttl=30)
    assert len(claimed) == 2
    listed = {s.prompt: s.runs[0] for s in await store.schedules_for(conversation_id, runs=3)}
    prompt, slow = listed["prompt"], listed["slow"]
    assert prompt.lag is not None
    assert prompt.lag < 30
    assert not prompt.late
    assert slow.lag is not None
    assert 89 <= slow.lag < 120
    assert slow.late
    assert "late: started 1 min" in lag_note(slow.lag, late=slow.late)
    first_start = slow.started_at
    # Its lease lapses and another runner takes it: the run started when it first did.
    await database.write(
        lambda conn: conn.execute(
            update(jobs).values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    )
    assert len(await store.claim_jobs(10, owner="runner-2", ttl=30)) == 2
    again = {s.prompt: s.runs[0] for s in await store.schedules_for(conversation_id, runs=3)}
    assert again["slow"].started_at == first_start
    report = await store.lag_report(timedelta(hours=1))
    assert (report.started, report.late) == (2, 1)
    assert report.worst is not None
    assert report.worst >= 89


def test_the_lag_histogram_counts_each_started_run_once() -> None:
    """/metrics reads the runs started since a little before the newest it has seen: a run
    read twice in that overlap is observed once."""
    metrics = Metrics()
    at = metrics.lag_watermark + timedelta(seconds=1)
    metrics.runs_started([StartedRun(1, at, 0.4), StartedRun(2, at, 75.0)])
    assert metrics.lag_since < at
    metrics.runs_started([StartedRun(2, at, 75.0), StartedRun(3, at, 1.5)])
    text = metrics.render().decode()
    assert "chatgate_schedule_lag_seconds_count 3.0" in text
    assert 'chatgate_schedule_lag_seconds_bucket{le="0.5"} 1.0' in text
    assert 'chatgate_schedule_lag_seconds_bucket{le="60.0"} 2.0' in text

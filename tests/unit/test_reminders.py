"""Reminders and late runs (issue #30): a ``message`` schedule posts its text at its slot
with no model call, once; a run that starts over a minute late says so first."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update

from agent_core.events import Reply, utcnow
from agent_core.records import CATCH_UP
from agent_core.storage.database import Database
from agent_core.storage.schema import jobs, messages, schedule_runs, turns
from agent_core.testing import RecordingJobQueue, ScriptedModel
from tests.unit.test_jobs import Harness
from workers.dispatcher import ScheduleDispatcher


async def _fire(harness: Harness, spec: str, **options: object) -> int:
    """Create a schedule in a fresh conversation, tick at its first slot; the job id."""
    conversation_id = await harness.conversation()
    created, _ = await harness.schedules.create(
        conversation_id=conversation_id, user="web:alice", prompt="Reminder: send the report",
        spec=spec, **options,  # type: ignore[arg-type]
    )  # fmt: skip
    assert created.next_run_at is not None
    queue = RecordingJobQueue()
    tick = await ScheduleDispatcher(harness.store, harness.schedules, queue).tick(
        created.next_run_at
    )
    assert tick.jobs == 1
    job_id = queue.jobs[0]
    await harness.make_due(job_id)
    return job_id


def _texts(harness: Harness) -> list[str]:
    return [item.text for item in harness.outbound.sent if isinstance(item, Reply)]


async def test_a_reminder_posts_its_text_once_with_no_model_call(database: Database) -> None:
    model = ScriptedModel()
    harness = Harness(database, model)
    job_id = await _fire(harness, "every 1h", action="message")
    row = await harness.job_row(job_id)
    assert row["kind"] == "message"
    assert await harness.jobs.run(job_id, owner="w1") is not None
    assert _texts(harness) == ["Reminder: send the report"]
    assert model.prompts == []
    row = await harness.job_row(job_id)
    assert row["status"] == "done"
    assert row["receipt"]
    # Its text is the turn's answer, stored once; the turn is done.
    stored = await database.read(
        lambda conn: conn.execute(
            select(messages.c.role, messages.c.text, turns.c.status).join(
                turns, turns.c.id == messages.c.turn_id
            )
        ).all()
    )
    assert [tuple(r) for r in stored] == [("assistant", "Reminder: send the report", "done")]
    # Run again (a redelivered message): nothing more is posted.
    assert await harness.jobs.run(job_id, owner="w2") is None
    assert _texts(harness) == ["Reminder: send the report"]


async def test_a_reminder_whose_post_was_stored_but_not_sent_sends_it_once(
    database: Database,
) -> None:
    """The worker died between storing the post and sending it: the next one finds the
    stored post and sends it under the same key, without storing a second."""
    harness = Harness(database, ScriptedModel())
    job_id = await _fire(harness, "every 1h", action="message")
    claimed = await harness.jobs.claim(job_id, owner="w1")
    assert claimed is not None
    assert await harness.store.reminder(job_id, owner="w1") is not None
    await database.write(
        lambda conn: conn.execute(
            update(jobs).values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    )
    assert await harness.jobs.run(job_id, owner="w2") is not None
    sent = [item for item in harness.outbound.sent if isinstance(item, Reply)]
    assert [(r.text, r.idempotency_key) for r in sent] == [
        ("Reminder: send the report", f"job:{job_id}:message")
    ]
    count = await database.read(
        lambda conn: len(
            conn.execute(select(messages.c.id).where(messages.c.turn_id.is_not(None))).all()
        )
    )
    assert count == 1


async def test_a_reminder_sent_before_its_worker_died_is_not_sent_again(
    database: Database,
) -> None:
    """The post went out and its receipt was stored, then the worker died before closing
    the job: the next one closes it with that receipt and sends nothing."""
    harness = Harness(database, ScriptedModel())
    job_id = await _fire(harness, "every 1h", action="message")
    assert await harness.jobs.claim(job_id, owner="w1") is not None
    found = await harness.store.reminder(job_id, owner="w1")
    assert found is not None
    await harness.store.note_sent(found[0], receipt="web:first")
    await database.write(
        lambda conn: conn.execute(
            update(jobs).values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    )
    assert await harness.jobs.run(job_id, owner="w2") is not None
    assert _texts(harness) == []
    row = await harness.job_row(job_id)
    assert (row["status"], row["receipt"]) == ("done", "web:first")


async def test_a_run_that_starts_late_says_so_first(database: Database) -> None:
    """A run planned three minutes ago starts now: a note with its time and how late it
    is goes first, once, then the answer; an on-time run has no note."""
    model = ScriptedModel("the answer")
    harness = Harness(database, model)
    job_id = await _fire(harness, "every 1h")
    await database.write(
        lambda conn: conn.execute(
            update(schedule_runs).values(due_at=utcnow() - timedelta(minutes=3))
        )
    )
    assert await harness.jobs.run(job_id, owner="w1") is not None
    texts = _texts(harness)
    assert len(texts) == 2
    assert texts[0].startswith("Schedule sc_")
    assert "this run was due at" in texts[0]
    assert "(late: started 3 min" in texts[0]
    assert texts[1] == "the answer"

    on_time = Harness(database, ScriptedModel("fine"))
    other = await _fire(on_time, "every 1h")
    assert await on_time.jobs.run(other, owner="w1") is not None
    assert _texts(on_time) == ["fine"]


async def test_missed_runs_a_policy_drops_leave_a_trace(database: Database) -> None:
    """Down for ten and a half hours over an hourly schedule: whatever each catch_up
    policy drops is in the audit log, with the range it covers; an on-time run has none."""
    from agent_core.storage.schema import audit_log
    from tests.unit.test_dispatcher import T0, _schedules

    harness = Harness(database, ScriptedModel())
    schedules = _schedules(harness.store, grace=timedelta(minutes=1), catch_up_max=3)
    conversation_id = await harness.conversation()
    made = {}
    for said, stored in CATCH_UP.items():
        created, _ = await schedules.create(
            conversation_id=conversation_id,
            user="web:alice",
            prompt=said,
            spec="every 1h",
            missed=stored,
            now=T0,
        )
        made[created.id] = said
    ontime, _ = await schedules.create(
        conversation_id=conversation_id,
        user="web:alice",
        prompt="on time",
        spec="every 1h",
        now=T0 + timedelta(hours=9, minutes=30),  # its first slot is the tick's moment
    )
    now = T0 + timedelta(hours=10, minutes=30)
    await ScheduleDispatcher(harness.store, schedules, RecordingJobQueue()).tick(now)
    entries = await database.read(
        lambda conn: conn.execute(
            select(audit_log.c.subject, audit_log.c.detail).where(
                audit_log.c.action == "schedule.missed"
            )
        ).all()
    )
    found = {made[subject]: detail for subject, detail in entries}
    first = (T0 + timedelta(hours=1)).isoformat()
    assert found == {
        "skip": {"from": first, "until": now.isoformat(), "catch_up": "skip"},
        "latest": {"from": first, "until": (T0 + timedelta(hours=10)).isoformat(),
                   "catch_up": "latest"},
        "all": {"from": first, "until": (T0 + timedelta(hours=8)).isoformat(),
                "catch_up": "all"},
    }  # fmt: skip
    assert ontime.id not in {subject for subject, _ in entries}

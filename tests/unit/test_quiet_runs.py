"""Quiet runs (issue #30): a schedule with ``notify = "if_notable"`` posts a run's answer
only when its model marks it worth posting; otherwise the run is journaled and listed as
"nothing to report"."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from agent_core.events import Reply
from agent_core.notable import INSTRUCTION, sift
from agent_core.scheduling.recurrence import ScheduleError
from agent_core.storage.database import Database
from agent_core.storage.schema import messages, turn_steps, turns
from agent_core.testing import ScriptedModel
from gateway.commands import run_line
from tests.unit.test_jobs import Harness
from tests.unit.test_reminders import _fire


@pytest.mark.parametrize(
    ("answer", "post", "text"),
    [
        ('{"notable": false, "report": "all green"}', False, "all green"),
        ('{"notable": true, "report": "Build 812 is red."}', True, "Build 812 is red."),
        ('```json\n{"notable": false, "report": "quiet"}\n```', False, "quiet"),
        ('Checked it.\n{"notable": true, "report": "Disk at 91%"}', True, "Disk at 91%"),
        ('{"notable": true}', True, '{"notable": true}'),
        # Not in the format: posted as it is, never silenced.
        ("The build is red.", True, "The build is red."),
        ('{"notable": "no", "report": "x"}', True, '{"notable": "no", "report": "x"}'),
        ("[1, 2]", True, "[1, 2]"),
    ],
)
def test_sift_reads_the_verdict_and_posts_whatever_it_cannot_read(
    answer: str, post: bool, text: str
) -> None:
    sifted = sift(answer)
    assert (sifted.post, sifted.text) == (post, text)


async def _quiet_run(harness: Harness) -> int:
    return await _fire(harness, "every 1h", notify="if_notable")


async def test_a_run_not_worth_posting_posts_nothing_and_is_listed_as_such(
    database: Database,
) -> None:
    model = ScriptedModel('{"notable": false, "report": "all 40 checks green"}')
    harness = Harness(database, model)
    job_id = await _quiet_run(harness)
    assert await harness.jobs.run(job_id, owner="w1") is not None
    assert harness.outbound.sent == []
    # The model was asked the schedule's prompt, with how to answer.
    assert model.prompts[0][-1].content == "Reminder: send the report" + INSTRUCTION
    row = await harness.job_row(job_id)
    assert (row["status"], row["receipt"], row["error"]) == ("done", None, None)
    steps, texts = await database.read(
        lambda conn: (
            conn.execute(
                select(turn_steps.c.kind, turn_steps.c.status, turn_steps.c.input)
                .join(turns, turns.c.id == turn_steps.c.turn_id)
                .where(turns.c.quiet.is_(True))
                .order_by(turn_steps.c.seq)
            ).all(),
            conn.execute(select(messages.c.text).where(messages.c.role == "assistant"))
            .scalars()
            .all(),
        )
    )  # fmt: skip
    assert [(kind, status) for kind, status, _ in steps] == [
        ("model_call", "done"),
        ("reply", "done"),
    ]
    assert steps[-1][2] == {"role": "assistant", "text": "all 40 checks green", "posted": False}
    assert texts == []  # nothing entered the history
    [schedule] = await harness.schedules.listing(str(row["conversation_id"]))
    [run] = schedule.runs
    assert run.nothing_to_report
    assert run_line(run).endswith(", nothing to report")
    assert "posts only when notable" in harness.schedules.describe(schedule)


async def test_a_notable_run_posts_its_report(database: Database) -> None:
    model = ScriptedModel('{"notable": true, "report": "Build 812 is red: test_login."}')
    harness = Harness(database, model)
    job_id = await _quiet_run(harness)
    await harness.jobs.run(job_id, owner="w1")
    assert [r.text for r in harness.outbound.sent if isinstance(r, Reply)] == [
        "Build 812 is red: test_login."
    ]
    row = await harness.job_row(job_id)
    assert row["status"] == "done"
    assert row["receipt"]
    [schedule] = await harness.schedules.listing(str(row["conversation_id"]))
    assert not schedule.runs[0].nothing_to_report


async def test_a_reminder_cannot_be_quiet(database: Database) -> None:
    harness = Harness(database, ScriptedModel())
    conversation_id = await harness.conversation()
    with pytest.raises(ScheduleError, match="reminder is its own post"):
        await harness.schedules.create(
            conversation_id=conversation_id, user="web:alice", prompt="Reminder: x",
            spec="every 1h", action="message", notify="if_notable",
        )  # fmt: skip

"""Running jobs: queued turns delivered once, retried with backoff, paused after failures,
and waiting durably for approvals."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, update

from agent_core.approvals import Approvals
from agent_core.delivery import ChunkSent
from agent_core.errors import DeliveryError, ModelError
from agent_core.events import ApprovalPrompt, InboundMessage, Reply, utcnow
from agent_core.jobs import JobPolicy, JobRunner
from agent_core.model import ModelReply, ToolCallRequest
from agent_core.permissions import Permissions, PolicyRule
from agent_core.scheduling.recurrence import ScheduleError
from agent_core.scheduling.service import ScheduleLimits, Schedules
from agent_core.secrets import Secrets
from agent_core.storage.database import Database
from agent_core.storage.schema import jobs
from agent_core.storage.store import Store
from agent_core.testing import RecordingJobQueue, RecordingOutbound, ScriptedModel, turn_runner
from agent_core.tool_steps import ToolRound
from agent_core.tools.base import Tool, ToolContext, TurnContext
from agent_core.tools.registry import ToolRegistry
from workers.dispatcher import ScheduleDispatcher

POLICY = JobPolicy(lease_seconds=30, max_attempts=3, backoff_seconds=10, failure_limit=2)


class Harness:
    def __init__(self, database: Database, model: ScriptedModel) -> None:
        self.store = Store(database)
        self.outbound = RecordingOutbound()
        self.effects: list[str] = []

        def build(turn: TurnContext) -> list[Tool]:
            async def deploy(context: ToolContext, service: str) -> str:
                """Deploy a service (risky)."""
                self.effects.append(f"{context.turn.user}:{service}")
                return f"deployed {service}"

            return [Tool(deploy, idempotent=False)]

        tool_round = ToolRound(
            self.store,
            outbound=self.outbound,
            permissions=Permissions([PolicyRule(tool="deploy", decision="ask")]),
            secrets=Secrets(),
            approval_ttl=timedelta(minutes=30),
        )
        self.runner = turn_runner(
            self.store,
            model=model,
            outbound=self.outbound,
            system_prompt="s",
            tools=ToolRegistry([build]),
            tool_round=tool_round,
        )
        self.jobs = JobRunner(self.store, self.runner, self.outbound, policy=POLICY)
        self.schedules = Schedules(self.store, limits=ScheduleLimits())
        self.database = database

    async def conversation(self) -> str:
        accepted = await self.store.accept_inbound(
            InboundMessage(
                platform="web",
                workspace="local",
                channel="ops",
                user="web:alice",
                text="hi",
                platform_event_id="seed",
            ),
            open_turn=False,
        )
        return accepted.conversation_id

    async def job_row(self, job_id: int) -> dict[str, object]:
        return await self.database.read(
            lambda conn: dict(conn.execute(select(jobs).where(jobs.c.id == job_id)).one()._mapping)
        )

    async def make_due(self, job_id: int) -> None:
        await self.database.write(
            lambda conn: conn.execute(
                update(jobs).where(jobs.c.id == job_id).values(not_before=utcnow())
            )
        )


def _replies(outbound: RecordingOutbound) -> list[Reply]:
    return [r for r in outbound.sent if isinstance(r, Reply)]


async def test_a_background_turn_is_answered_once_with_its_receipt(database: Database) -> None:
    harness = Harness(database, ScriptedModel("the summary"))
    conversation_id = await harness.conversation()
    job_id = await harness.store.background_turn(
        conversation_id, user="web:alice", prompt="summarise", reply_to="m1"
    )
    ran = await harness.jobs.run(None, owner="w1")
    assert ran is not None
    assert ran.id == job_id
    [reply] = _replies(harness.outbound)
    assert reply.text == "the summary"
    assert reply.reply_to == "m1"
    row = await harness.job_row(job_id)
    assert row["status"] == "done"
    assert row["receipt"] == "receipt-1"
    # Nothing left to claim; running it again by id changes nothing.
    assert await harness.jobs.run(None, owner="w2") is None
    assert await harness.jobs.run(job_id, owner="w2") is None
    assert len(harness.outbound.sent) == 1


async def test_a_failing_run_backs_off_then_fails_and_pauses_its_schedule(
    database: Database,
) -> None:
    errors = [ModelError("model down") for _ in range(6)]
    harness = Harness(database, ScriptedModel(*errors))
    conversation_id = await harness.conversation()
    created, _ = await harness.schedules.create(
        conversation_id=conversation_id, user="web:alice", prompt="report", spec="every 1h"
    )
    for run in range(2):
        # A tick an hour (then two) from now: the job is dated by the tick.
        now = datetime.now(UTC) + timedelta(hours=run + 1, minutes=1)
        tick = await ScheduleDispatcher(harness.store, harness.schedules, RecordingJobQueue()).tick(
            now
        )
        assert tick.jobs == 1
        job_id = await harness.database.read(
            lambda conn: int(conn.execute(select(jobs.c.id).order_by(jobs.c.id.desc())).scalar())
        )
        await harness.make_due(job_id)
        waits = []
        for attempt in range(1, POLICY.max_attempts + 1):
            before = utcnow()
            assert await harness.jobs.run(job_id, owner="w1") is not None
            row = await harness.job_row(job_id)
            if attempt < POLICY.max_attempts:
                assert row["status"] == "queued"
                assert row["error"] == "ModelError: model down"
                waits.append((row["not_before"] - before).total_seconds())  # type: ignore[operator]
                # Not due yet: nobody may claim it before its backoff.
                assert await harness.jobs.run(job_id, owner="w1") is None
                await harness.make_due(job_id)
            else:
                assert row["status"] == "failed"
        assert [round(w) for w in waits] == [10, 20]
    paused = await harness.store.schedule(created.id)
    assert paused is not None
    assert paused.status == "paused"
    assert paused.failures == 2
    texts = [r.text for r in _replies(harness.outbound)]
    # Each run's last attempt answered with the error; then the pause was announced.
    assert sum("could not be reached" in t for t in texts) == 2
    assert texts[-1].startswith(f"I paused schedule {created.id} after 2 failed runs")
    listed = await harness.store.schedules_for(conversation_id, runs=5)
    assert [r.status for r in listed[0].runs] == ["failed", "failed"]


async def test_a_scheduled_turn_waits_for_approval_and_resumes_as_its_creator(
    database: Database,
) -> None:
    call = ModelReply(
        text="",
        model="scripted",
        tool_calls=(ToolCallRequest(id="c1", name="deploy", arguments='{"service": "api"}'),),
    )
    harness = Harness(database, ScriptedModel(call, "deployed it"))
    conversation_id = await harness.conversation()
    await harness.schedules.create(
        conversation_id=conversation_id, user="web:alice", prompt="deploy api", spec="in 1h"
    )
    now = utcnow() + timedelta(hours=1, seconds=1)
    _count, [job_id] = await harness.store.dispatch_due(
        now=now, plan=lambda due: harness.schedules.plan(due, now=now)
    )
    await harness.make_due(job_id)
    await harness.jobs.run(job_id, owner="w1")
    [prompt] = [p for p in harness.outbound.sent if isinstance(p, ApprovalPrompt)]
    assert prompt.requested_by == "web:alice"
    assert (await harness.job_row(job_id))["status"] == "waiting"
    assert harness.effects == []
    # Waiting holds nothing: no runner may take it until someone decides.
    assert await harness.jobs.run(None, owner="w2") is None
    approvals = Approvals(harness.store, harness.outbound, admins=())
    decided = await approvals.decide(prompt.approval_id, decision="approve", user="web:alice")
    assert decided.requeued_jobs == (job_id,)
    assert await harness.jobs.run(None, owner="w2") is not None
    assert harness.effects == ["web:alice:api"]
    assert _replies(harness.outbound)[-1].text == "deployed it"
    assert (await harness.job_row(job_id))["status"] == "done"


async def test_a_job_whose_runner_died_is_taken_over_after_its_lease(database: Database) -> None:
    harness = Harness(database, ScriptedModel("late answer"))
    conversation_id = await harness.conversation()
    job_id = await harness.store.background_turn(
        conversation_id, user="web:alice", prompt="p", reply_to=None
    )
    dead = await harness.store.claim_job(job_id, owner="dead", ttl=30)
    assert dead is not None
    assert await harness.jobs.run(None, owner="w2") is None
    await harness.database.write(
        lambda conn: conn.execute(
            update(jobs)
            .where(jobs.c.id == job_id)
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    )
    taken = await harness.jobs.run(None, owner="w2")
    assert taken is not None
    assert taken.attempts == 2
    assert [r.text for r in _replies(harness.outbound)] == ["late answer"]
    assert await harness.store.renew_job(job_id, owner="dead", ttl=30) is False


class PickyOutbound(RecordingOutbound):
    """Delivers everywhere except to one channel, whose platform is down."""

    def __init__(self, broken: str) -> None:
        super().__init__()
        self.broken = broken

    async def send(
        self, reply: Reply | ApprovalPrompt, *, progress: ChunkSent | None = None
    ) -> str:
        if reply.conversation.channel == self.broken:
            raise DeliveryError(f"{self.broken} is down")
        return await super().send(reply)


async def test_fan_out_delivers_to_each_target_independently(database: Database) -> None:
    harness = Harness(database, ScriptedModel())
    outbound = PickyOutbound("broken-room")
    harness.runner = turn_runner(
        harness.store, model=ScriptedModel(), outbound=outbound, system_prompt="s"
    )
    harness.jobs = JobRunner(harness.store, harness.runner, outbound, policy=POLICY)
    schedules = Schedules(harness.store, limits=ScheduleLimits(), admins=["web:admin"])
    home = await harness.conversation()
    for room in ("ops-room", "broken-room"):
        await harness.store.accept_inbound(
            InboundMessage(
                platform="web",
                workspace="local",
                channel=room,
                user="web:admin",
                text="hi",
                platform_event_id=f"seed-{room}",
            ),
            open_turn=False,
        )
    with pytest.raises(ScheduleError, match="only an admin"):
        await schedules.create(
            conversation_id=home, user="web:alice", prompt="p", spec="in 1h", also_in=["web:x"]
        )
    with pytest.raises(ScheduleError, match="no conversation 'web:nowhere'"):
        await schedules.create(
            conversation_id=home,
            user="web:admin",
            prompt="p",
            spec="in 1h",
            also_in=["web:nowhere"],
        )
    created, _ = await schedules.create(
        conversation_id=home,
        user="web:admin",
        prompt="status report",
        spec="in 1h",
        also_in=["web:ops-room", "web:broken-room"],
    )
    assert len(created.targets) == 3
    now = utcnow() + timedelta(hours=1, seconds=1)
    _count, job_ids = await harness.store.dispatch_due(
        now=now, plan=lambda due: schedules.plan(due, now=now)
    )
    assert len(job_ids) == 3
    for job_id in job_ids:
        await harness.make_due(job_id)
    # Three deliveries, three jobs: the broken target fails and waits for its retry while
    # the other two are delivered.
    while await harness.jobs.run(None, owner="w1") is not None:
        pass
    rows = [await harness.job_row(j) for j in job_ids]
    assert sorted(str(row["status"]) for row in rows) == ["done", "done", "queued"]
    channels = sorted(r.conversation.channel for r in _replies(outbound))
    assert channels == ["ops", "ops-room"]
    [broken] = [row for row in rows if row["status"] == "queued"]
    assert broken["error"] == "DeliveryError: broken-room is down"
    assert all(row["receipt"] for row in rows if row["status"] == "done")


class _Stuck(ScriptedModel):
    """A model call that never ends (until the test cancels it)."""

    def __init__(self) -> None:
        super().__init__()
        self.called = asyncio.Event()

    async def complete(self, *args: object, **kwargs: object) -> ModelReply:
        self.called.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_a_job_cut_short_by_a_drain_is_handed_back_at_once(database: Database) -> None:
    model = _Stuck()
    harness = Harness(database, model)
    conversation_id = await harness.conversation()
    job_id = await harness.store.background_turn(
        conversation_id, user="web:alice", prompt="summarise", reply_to=None
    )
    other = await harness.store.background_turn(
        conversation_id, user="web:alice", prompt="other", reply_to=None
    )
    # A cancellation that is not a drain (a time limit) leaves the job to its lease.
    running = asyncio.create_task(harness.jobs.run(other, owner="w1"))
    await asyncio.wait_for(model.called.wait(), 10)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    row = await harness.job_row(other)
    assert (row["status"], row["lease_owner"], row["attempts"]) == ("running", "w1", 1)

    model.called.clear()
    running = asyncio.create_task(harness.jobs.run(job_id, owner="w1"))
    await asyncio.wait_for(model.called.wait(), 10)
    assert (await harness.job_row(job_id))["attempts"] == 1
    harness.jobs.draining = True  # what LocalRunner.drain does, then it cancels
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    row = await harness.job_row(job_id)
    assert (row["status"], row["lease_owner"], row["attempts"]) == ("queued", None, 0)
    # Due now, for another runner, without waiting for the lease to expire.
    harness.runner = turn_runner(
        harness.store, model=ScriptedModel("done"), outbound=harness.outbound, system_prompt="s"
    )
    again = JobRunner(harness.store, harness.runner, harness.outbound, policy=POLICY)
    assert await again.run(job_id, owner="w2") is not None
    assert (await harness.job_row(job_id))["status"] == "done"

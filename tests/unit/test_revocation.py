"""What acts for a person stops when they lose access: queued runs are refused before
the model is called, a turn resuming after a wait stops, and the sweep cancels approvals
and pauses schedules, whether the user was revoked or their allow entry dropped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select, update

from agent_core.access import AccessPolicy, Membership
from agent_core.approvals import Approvals
from agent_core.events import InboundMessage, Reply, utcnow
from agent_core.jobs import JobPolicy, JobRunner
from agent_core.model import ModelReply, ToolCallRequest
from agent_core.permissions import Permissions, PolicyRule
from agent_core.records import ApprovalRequest
from agent_core.revocation import Revocations
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

BOB = "telegram:42"


class World:
    """The core of one process for a Telegram chat, with a pairing policy."""

    def __init__(self, database: Database, model: ScriptedModel, *, allow: tuple[str, ...] = ()):
        self.store = Store(database)
        self.database = database
        self.model = model
        self.outbound = RecordingOutbound()
        self.policy = AccessPolicy(mode="pairing", allow=allow, admins=())
        self.membership = Membership(self.policy, self.store.is_paired)
        self.ran: list[str] = []
        self.hours = 0

        def build(turn: TurnContext) -> list[Tool]:
            async def deploy(context: ToolContext, service: str) -> str:
                """Deploy a service (risky)."""
                self.ran.append(service)
                return f"deployed {service}"

            return [Tool(deploy, idempotent=False)]

        self.runner = turn_runner(
            self.store,
            model=model,
            outbound=self.outbound,
            system_prompt="s",
            tools=ToolRegistry([build]),
            tool_round=ToolRound(
                self.store,
                outbound=self.outbound,
                permissions=Permissions([PolicyRule(tool="deploy", decision="ask")]),
                secrets=Secrets(),
                approval_ttl=timedelta(minutes=30),
            ),
            may_talk=self.membership.may_talk,
        )
        self.jobs = JobRunner(
            self.store,
            self.runner,
            self.outbound,
            policy=JobPolicy(lease_seconds=30),
            may_talk=self.membership.may_talk,
        )
        self.schedules = Schedules(self.store, limits=ScheduleLimits())
        self.approvals = Approvals(
            self.store, self.outbound, admins=(), may_talk=self.membership.may_talk
        )
        self.revocations = Revocations(
            self.store, self.outbound, approvals=self.approvals, may_talk=self.membership.may_talk
        )

    async def pair(self, user: str) -> None:
        _, request = await self.store.request_pairing(
            platform="telegram",
            user=user,
            conversation_id=await self.conversation(),
            code="ABCD-EFGH",
            expires_at=utcnow() + timedelta(hours=1),
            max_pending=3,
        )
        assert request is not None
        await self.store.approve_pairing(request.code, actor="cli:root")

    async def conversation(self) -> str:
        accepted = await self.store.accept_inbound(
            InboundMessage(
                platform="telegram",
                workspace="bot",
                channel="-100",
                user=BOB,
                text="hi",
                platform_event_id="seed",
            ),
            open_turn=False,
        )
        return accepted.conversation_id  # the same for every call: the ledger dedupes

    async def fire(self) -> int:
        """Tick the dispatcher an hour further on each time: the schedule's next run
        becomes a job, due now."""
        self.hours += 1
        now = datetime.now(UTC) + timedelta(hours=self.hours, minutes=1)
        tick = await ScheduleDispatcher(self.store, self.schedules, RecordingJobQueue()).tick(now)
        assert tick.jobs == 1
        job_id: int = await self.database.read(
            lambda conn: int(conn.execute(select(jobs.c.id).order_by(jobs.c.id.desc())).scalar())
        )
        await self.database.write(
            lambda conn: conn.execute(
                update(jobs).where(jobs.c.id == job_id).values(not_before=utcnow())
            )
        )
        return job_id

    def texts(self) -> list[str]:
        return [r.text for r in self.outbound.sent if isinstance(r, Reply)]


async def test_a_revoked_owner_s_scheduled_run_does_not_call_the_model(
    database: Database,
) -> None:
    """The run checks its owner first: revoked, the job ends without a model call, the
    schedule pauses and the conversation is told; paired, it runs."""
    world = World(database, ScriptedModel("report for bob", "never"))
    await world.pair(BOB)
    conversation_id = await world.conversation()
    created, _ = await world.schedules.create(
        conversation_id=conversation_id, user=BOB, prompt="report", spec="every 1h"
    )
    await world.jobs.run(await world.fire(), owner="w1")
    assert world.texts() == ["report for bob"]
    assert len(world.model.prompts) == 1

    assert await world.store.revoke_user(BOB, actor="cli:root")
    job_id = await world.fire()
    assert await world.jobs.run(job_id, owner="w1") is not None
    assert len(world.model.prompts) == 1
    schedule = await world.store.schedule(created.id)
    assert schedule is not None
    assert schedule.status == "paused"
    assert world.texts()[-1] == (
        f"Schedule {created.id} did not run and is paused: {BOB}, who made it, may no "
        "longer use the agent here."
    )
    row = await database.read(
        lambda conn: conn.execute(select(jobs).where(jobs.c.id == job_id)).one()
    )
    assert (row.status, row.error) == ("failed", "the owner may no longer use the agent here")


async def test_a_background_job_of_someone_whose_allow_entry_was_dropped_is_refused(
    database: Database,
) -> None:
    """Allowed by the chat's allow entry when queued; the entry gone (a restart with new
    settings): the job does not call the model."""
    allowed = World(database, ScriptedModel("x"), allow=("telegram:chat:-100",))
    conversation_id = await allowed.conversation()
    job_id = await allowed.store.background_turn(
        conversation_id, user=BOB, prompt="summarise", reply_to=None
    )
    dropped = World(database, ScriptedModel("never"))
    assert await dropped.jobs.run(job_id, owner="w1") is not None
    assert dropped.model.prompts == []
    assert dropped.texts() == [
        f"The background task of {BOB} did not run: they may no longer use the agent here."
    ]


async def test_the_sweep_cancels_approvals_and_pauses_schedules_of_revoked_users(
    database: Database,
) -> None:
    """A full pass at start (nothing to do while Bob is paired), then only after a
    revocation: Bob's approval is cancelled (prompt edited to say why) and his schedule
    paused with a note; the turn the approval held ends without a model call."""
    call = ModelReply(
        text="",
        model="scripted",
        tool_calls=(ToolCallRequest(id="c1", name="deploy", arguments='{"service": "api"}'),),
    )
    world = World(database, ScriptedModel(call, "never"))
    await world.pair(BOB)
    conversation_id = await world.conversation()
    created, _ = await world.schedules.create(
        conversation_id=conversation_id, user=BOB, prompt="report", spec="every 1h"
    )
    accepted = await world.store.accept_inbound(
        InboundMessage(
            platform="telegram",
            workspace="bot",
            channel="-100",
            user=BOB,
            text="deploy the api",
            platform_event_id="m2",
        )
    )
    turn = await world.store.begin_next_turn(accepted.conversation_id)
    assert turn is not None
    assert await world.runner.run_turn(turn) == "waiting"
    assert await world.revocations.sweep() == []
    assert await world.revocations.sweep() == []  # nothing new: no query beyond one

    assert await world.store.revoke_user(BOB, actor="cli:root")
    [cancelled] = await world.revocations.sweep()
    assert cancelled.status == "cancelled"
    assert world.outbound.edits[-1].text == (
        f"The approval for deploy was cancelled: {BOB} may no longer use the agent here."
    )
    schedule = await world.store.schedule(created.id)
    assert schedule is not None
    assert schedule.status == "paused"
    assert f"I paused schedule {created.id}" in world.texts()[-1]
    assert await world.revocations.sweep() == []  # acted once

    resumed = await world.store.begin_next_turn(accepted.conversation_id)
    assert resumed is not None
    assert await world.runner.run_turn(resumed) == "failed"
    assert world.texts()[-1] == f"Stopped: {BOB} may no longer use the agent here."
    assert len(world.model.prompts) == 1
    assert world.ran == []


async def test_a_revoked_requester_may_not_approve_their_own_call(database: Database) -> None:
    """Approving your own call needs you to still be let in."""
    world = World(database, ScriptedModel())
    await world.pair(BOB)
    conversation_id = await world.conversation()
    turn = await world.store.start_turn(
        await world.store.background_turn(conversation_id, user=BOB, prompt="p", reply_to=None)
    )
    approval = await world.store.request_approval(
        turn,
        2,
        ApprovalRequest(
            kind="tool",
            tool="deploy",
            arguments={},
            approvers=(),
            expires_at=utcnow() + timedelta(hours=1),
            prompt_text="?",
            call_id="c1",
        ),
    )
    assert await world.approvals.refusal(approval, BOB) is None
    await world.store.revoke_user(BOB, actor="cli:root")
    assert await world.approvals.refusal(approval, BOB) == "no_access"


async def test_a_slack_connect_guest_is_no_member_by_the_channels_workspace_entry(
    database: Database,
) -> None:
    """approvers = ["role:member"] in a channel whose workspace is allowed: a member of
    that workspace may decide; a guest from another organisation in the shared channel
    may not (their press carries their own team)."""
    store = Store(database)
    policy = AccessPolicy(mode="allowlist", allow=("slack:T0MINE:*",), admins=())
    approvals = Approvals(
        store, RecordingOutbound(), admins=(), may_talk=Membership(policy, store.is_paired).may_talk
    )
    accepted = await store.accept_inbound(
        InboundMessage(
            platform="slack",
            workspace="T0MINE",
            channel="C0SHARED",
            user="slack:U0ALICE",
            text="hi",
            platform_event_id="e1",
            user_team="T0MINE",
        ),
        open_turn=False,
    )
    turn = await store.start_turn(
        await store.background_turn(
            accepted.conversation_id, user="slack:U0ALICE", prompt="p", reply_to=None
        )
    )
    approval = await store.request_approval(
        turn,
        2,
        ApprovalRequest(
            kind="tool",
            tool="deploy",
            arguments={},
            approvers=("role:member",),
            expires_at=utcnow() + timedelta(hours=1),
            prompt_text="?",
            call_id="c1",
        ),
    )
    assert await approvals.refusal(approval, "slack:U0BOB", team="T0MINE") is None
    assert await approvals.refusal(approval, "slack:U0GUEST", team="T0OTHER") == "not_approver"

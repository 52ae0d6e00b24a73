"""Who may talk to the agent, through the real inbound routing, store, gate and turn runner.

The platform adapters are not built yet, so these tests hand inbound routing the events a
Telegram, Slack or Discord adapter will produce.
"""

from __future__ import annotations

import asyncio
import itertools
from datetime import timedelta
from typing import Any

import pytest

from adapters.web.send import WebHub
from agent_core.access import AccessPolicy
from agent_core.approvals import Approvals
from agent_core.errors import NotAllowedToDecide, PairingRefused
from agent_core.events import InboundMessage, Platform, Reply
from agent_core.gatekeeper import Gatekeeper
from agent_core.ratelimit import Limiter, RateLimiter
from agent_core.scheduling.service import ScheduleLimits, Schedules
from agent_core.settings import Settings
from agent_core.storage.database import Database
from agent_core.storage.store import Store
from agent_core.testing import RecordingJobQueue, RecordingOutbound, ScriptedModel, turn_runner
from gateway.commands import ChatCommands
from gateway.inbound import Inbound
from gateway.metrics import Metrics
from gateway.shared_limits import shared_limiters
from gateway.supervisor import Supervisor
from tests.fakes.records import pending_approval

_ids = itertools.count()


class Harness:
    """One gateway's worth of real parts, with a scripted model and a recording outbound."""

    def __init__(
        self,
        database: Database,
        *,
        mode: str = "pairing",
        allow: tuple[str, ...] = (),
        admins: tuple[str, ...] = ("telegram:1",),
        burst: int = 8,
        pairing_minutes: float = 60,
        model: ScriptedModel | None = None,
        limiters: tuple[Limiter, Limiter] | None = None,
    ) -> None:
        self.store = Store(database)
        self.model = model or ScriptedModel()
        self.outbound = RecordingOutbound()
        runner = turn_runner(
            self.store, model=self.model, outbound=self.outbound, system_prompt="s"
        )
        self.supervisor = Supervisor(
            lambda c: runner.run_conversation(c, owner="h", lease=30), max_concurrent=8
        )
        self.gate = gate = Gatekeeper(
            self.store,
            self.outbound,
            policy=AccessPolicy(mode=mode, allow=allow, admins=admins),  # type: ignore[arg-type]
            users=limiters[0] if limiters else RateLimiter(burst=burst, per_minute=6),
            conversations=limiters[1] if limiters else RateLimiter(burst=3 * burst, per_minute=18),
            pairing_ttl=timedelta(minutes=pairing_minutes),
            max_pending=3,
        )
        self.metrics = Metrics()
        schedules = Schedules(self.store, limits=ScheduleLimits())
        queue = RecordingJobQueue()
        self.inbound = Inbound(
            self.store,
            self.supervisor,
            approvals=Approvals(self.store, self.outbound, admins=admins),
            gate=gate,
            metrics=self.metrics,
            hub=WebHub(),
            schedules=schedules,
            jobs=queue,
            commands=ChatCommands(self.store, gate=gate, schedules=schedules, submit=queue.submit),
        )

    async def say(
        self,
        user: str,
        text: str = "hello",
        *,
        platform: Platform = "telegram",
        workspace: str = "bot",
        channel: str | None = None,
    ) -> Any:
        event = InboundMessage(
            platform=platform,
            workspace=workspace,
            channel=channel or user.split(":")[1],
            user=user,
            text=text,
            platform_event_id=f"e{next(_ids)}",
        )
        accepted = await self.inbound.accept(event)
        while self.supervisor.active:
            await asyncio.sleep(0.01)
        return accepted

    def texts_to(self, channel: str) -> list[str]:
        return [
            r.text
            for r in self.outbound.sent
            if isinstance(r, Reply) and r.conversation.channel == channel
        ]


async def test_a_stranger_gets_a_code_and_after_approval_is_answered(database: Database) -> None:
    """Pairing: no model call, one code; approve (audited); answered, also after a restart;
    revoked: not answered again."""
    gate = Harness(database)
    await gate.say("telegram:42", "hi there")
    await gate.say("telegram:42", "anyone?")
    assert gate.model.prompts == []
    (notice,) = gate.texts_to("42")
    code = notice.split("approve ")[1].split("`")[0]
    pending, _ = await gate.store.pairing_listing()
    assert [(p.code, p.user) for p in pending] == [(code, "telegram:42")]

    approved = await gate.store.approve_pairing(code.lower(), actor="cli:root")
    assert approved.user == "telegram:42"
    await gate.say("telegram:42", "now?")
    assert gate.texts_to("42")[-1] == "echo: now?"

    restarted = Harness(database)
    await restarted.say("telegram:42", "still?")
    assert restarted.texts_to("42") == ["echo: still?"]
    _, paired = await restarted.store.pairing_listing()
    assert [(u.user, u.approved_by) for u in paired] == [("telegram:42", "cli:root")]

    assert await restarted.store.revoke_user("telegram:42", actor="cli:root")
    calls = len(restarted.model.prompts)
    await restarted.say("telegram:42", "and now?")
    assert len(restarted.model.prompts) == calls
    with pytest.raises(PairingRefused, match="already used"):
        await restarted.store.approve_pairing(code, actor="cli:root")


async def test_an_expired_code_does_nothing(database: Database) -> None:
    """A code past its hour cannot be approved; the stranger stays out."""
    gate = Harness(database, pairing_minutes=0.001)
    await gate.say("telegram:42")
    code = gate.texts_to("42")[0].split("approve ")[1].split("`")[0]
    await asyncio.sleep(0.1)
    with pytest.raises(PairingRefused, match="expired"):
        await gate.store.approve_pairing(code, actor="cli:root")
    await gate.say("telegram:42", "let me in")
    assert gate.model.prompts == []


async def test_strangers_cannot_flood_the_admins(database: Database) -> None:
    """At most three pending codes per platform; the fourth stranger gets nothing."""
    gate = Harness(database)
    for user in ("telegram:11", "telegram:12", "telegram:13", "telegram:14"):
        await gate.say(user)
    pending, _ = await gate.store.pairing_listing()
    assert len(pending) == 3
    assert gate.texts_to("14") == []


async def test_allowlist_refuses_strangers_and_admits_listed_groups(database: Database) -> None:
    """An unlisted user gets one short refusal and no model call; a listed workspace,
    guild or chat admits all its members."""
    gate = Harness(
        database, mode="allowlist", allow=("slack:T1:*", "discord:guild:G1", "telegram:chat:-100")
    )
    await gate.say("telegram:42", channel="42")
    await gate.say("telegram:42", "again", channel="42")
    assert gate.texts_to("42") == ["Sorry, I only talk to people on this workspace's allowlist."]
    await gate.say("slack:U5", "from slack", platform="slack", workspace="T1", channel="C1")
    await gate.say("discord:7", "from discord", platform="discord", workspace="G1", channel="D1")
    await gate.say("telegram:8", "from the group", channel="-100")
    assert [p[-1].content for p in gate.model.prompts] == [
        "from slack",
        "from discord",
        "from the group",
    ]


async def test_a_stranger_cannot_approve(database: Database) -> None:
    """/approve ID from someone not let in changes nothing; the admin's does."""
    gate = Harness(database)
    await gate.say("telegram:1", "list files")
    pending = await pending_approval(gate.store, 1, command="ls")
    await gate.say("telegram:666", f"/approve {pending.id}")
    assert (await gate.store.approval(pending.id)).status == "pending"  # type: ignore[union-attr]
    await gate.say("telegram:1", f"/approve {pending.id}")
    assert (await gate.store.approval(pending.id)).status == "approved"  # type: ignore[union-attr]


async def test_a_flooding_user_gets_the_burst_and_one_notice(database: Database) -> None:
    """100 messages in a burst: at most `burst` turns and one notice; another user in the
    same group is answered as usual."""
    gate = Harness(database, mode="open", burst=5)
    for index in range(100):
        await gate.say("telegram:50", f"spam {index}", channel="-200")
    await gate.say("telegram:51", "a real question", channel="-200")
    texts = gate.texts_to("-200")
    assert len([t for t in texts if t.startswith("echo: spam")]) == 5
    assert len([t for t in texts if "faster than I can take them" in t]) == 1
    assert texts[-1] == "echo: a real question"
    metrics = gate.metrics.render().decode()
    assert 'chatgate_inbound_events_total{outcome="limited",platform="telegram"} 95.0' in metrics


async def test_gateways_sharing_redis_share_one_rate(database: Database, redis_url: str) -> None:
    """Three gateways with their buckets in one Redis: a user's messages spread over them
    get one burst between them, and one notice; without Redis each would allow a burst."""
    settings = Settings(redis_url=redis_url, rate_burst=4, rate_per_minute=6)
    clients, gates = [], []
    for _ in range(3):
        client, users, conversations = shared_limiters(settings)
        clients.append(client)
        gates.append(Harness(database, mode="open", limiters=(users, conversations)))
    try:
        for index in range(12):
            await gates[index % 3].say("telegram:50", f"spam {index}", channel="-300")
        texts = [text for gate in gates for text in gate.texts_to("-300")]
        assert len([t for t in texts if t.startswith("echo: spam")]) == 4
        assert len([t for t in texts if "faster than I can take them" in t]) == 1
        # The group's own bucket (3 x 4) is not spent by one user's flood alone.
        await gates[1].say("telegram:51", "a real question", channel="-300")
        assert gates[1].texts_to("-300")[-1] == "echo: a real question"
    finally:
        for client in clients:
            await client.aclose()


async def test_a_policy_can_let_any_member_approve(database: Database) -> None:
    """approvers = ["role:member"]: a paired user may decide someone else's approval; a
    stranger still may not."""
    gate = Harness(database, mode="pairing")
    await gate.say("telegram:1", "deploy")
    pending = await pending_approval(
        gate.store, 1, command="make deploy", approvers=("role:member",)
    )
    approvals = Approvals(
        gate.store, gate.outbound, admins=("telegram:1",), may_talk=gate.gate.may_talk
    )
    with pytest.raises(NotAllowedToDecide):
        await approvals.decide(pending.id, decision="approve", user="telegram:77")
    await gate.say("telegram:77", "hi")
    code = gate.texts_to("77")[0].split("approve ")[1].split("`")[0]
    await gate.store.approve_pairing(code, actor="cli:root")
    decided = await approvals.decide(pending.id, decision="approve", user="telegram:77")
    assert decided.status == "approved"

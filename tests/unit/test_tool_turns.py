"""Turns with tools: permissions, approvals that wait in the database, and recovery."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from agent_core.approvals import Approvals
from agent_core.delivery import ChunkSent
from agent_core.errors import AlreadyDecided, NotAllowedToDecide
from agent_core.events import ApprovalPrompt, InboundMessage, Reply, utcnow
from agent_core.loop import TurnRunner
from agent_core.model import ModelReply, ToolCallRequest
from agent_core.permissions import Permissions, PolicyRule
from agent_core.secrets import Secrets
from agent_core.storage.database import Database
from agent_core.storage.store import Store
from agent_core.testing import RecordingOutbound, ScriptedModel, turn_runner
from agent_core.tool_steps import ToolRound
from agent_core.tools.base import Tool, ToolContext, TurnContext
from agent_core.tools.registry import ToolRegistry


class Effects:
    """Side effects the test tools made, and the keys they were given."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.running = 0
        self.peak = 0


def _registry(effects: Effects) -> ToolRegistry:
    def build(turn: TurnContext) -> list[Tool]:
        async def charge(context: ToolContext, amount: int) -> str:
            """Charge a card (not idempotent)."""
            effects.calls.append(("charge", context.idempotency_key))
            return f"charged {amount}"

        async def lookup(context: ToolContext, query: str) -> str:
            """Look something up (idempotent, slow)."""
            effects.running += 1
            effects.peak = max(effects.peak, effects.running)
            await asyncio.sleep(0.05)
            effects.running -= 1
            effects.calls.append(("lookup", context.idempotency_key))
            return f"found {query}" + (" token=s3cr3t-value" if query == "leak" else "")

        return [Tool(charge, idempotent=False), Tool(lookup, idempotent=True)]

    return ToolRegistry([build])


def _call(name: str, arguments: str, call_id: str = "c1") -> ModelReply:
    return ModelReply(
        text="",
        model="scripted",
        tool_calls=(ToolCallRequest(id=call_id, name=name, arguments=arguments),),
    )


RULES = [PolicyRule(tool="lookup", decision="allow"), PolicyRule(tool="charge", decision="ask")]


def _runner(
    store: Store,
    model: ScriptedModel,
    outbound: RecordingOutbound,
    effects: Effects,
    *,
    rules: list[PolicyRule] = RULES,
    ttl: float = 1800,
    max_steps: int = 8,
) -> TurnRunner:
    tool_round = ToolRound(
        store,
        outbound=outbound,
        permissions=Permissions(rules),
        secrets=Secrets({"TOKEN": "s3cr3t-value"}),
        approval_ttl=timedelta(seconds=ttl),
    )
    return turn_runner(
        store,
        model=model,
        outbound=outbound,
        system_prompt="s",
        tools=_registry(effects),
        tool_round=tool_round,
        max_steps=max_steps,
    )


async def _say(store: Store, text: str, event: str = "e1", user: str = "web:ann") -> str:
    accepted = await store.accept_inbound(
        InboundMessage(
            platform="web",
            workspace="local",
            channel="c",
            user=user,
            text=text,
            platform_event_id=event,
        )
    )
    return accepted.conversation_id


async def _crashed_mid_call(store: Store, tool: str, arguments: str) -> None:
    """What a crash between a call's intent and its result leaves in turn 1's journal."""
    await store.finish_step(
        1,
        1,
        kind="model_call",
        status="done",
        output={
            "role": "assistant",
            "text": "",
            "tool_calls": [{"id": "c1", "name": tool, "arguments": arguments}],
        },
    )
    await store.begin_step(1, 3, kind="tool_call", input={"name": tool})


def _replies(outbound: RecordingOutbound) -> list[str]:
    return [r.text for r in outbound.sent if isinstance(r, Reply)]


def _prompts(outbound: RecordingOutbound) -> list[ApprovalPrompt]:
    return [p for p in outbound.sent if isinstance(p, ApprovalPrompt)]


async def test_an_allowed_tool_runs_and_its_result_goes_back_to_the_model(
    database: Database,
) -> None:
    """model -> tool -> model -> reply; the second prompt carries the call and its result."""
    store, outbound, effects = Store(database), RecordingOutbound(), Effects()
    model = ScriptedModel(_call("lookup", '{"query": "weather"}'), "It is sunny.")
    conversation = await _say(store, "weather?")
    await _runner(store, model, outbound, effects).run_conversation(
        conversation, owner="o", lease=30
    )
    assert _replies(outbound) == ["It is sunny."]
    assert model.tools[0] == ["charge", "lookup"]
    last = model.prompts[1]
    assert last[-2].tool_calls[0].name == "lookup"
    assert (last[-1].role, last[-1].content, last[-1].tool_call_id) == (
        "tool",
        "found weather",
        "c1",
    )
    assert effects.calls == [("lookup", f"{1}:3")]


async def test_calls_of_one_response_run_concurrently(database: Database) -> None:
    """Three lookups in one response overlap in time."""
    store, outbound, effects = Store(database), RecordingOutbound(), Effects()
    calls = tuple(
        ToolCallRequest(id=f"c{i}", name="lookup", arguments=f'{{"query": "q{i}"}}')
        for i in range(3)
    )
    model = ScriptedModel(ModelReply(text="", model="m", tool_calls=calls), "done")
    conversation = await _say(store, "go")
    await _runner(store, model, outbound, effects).run_conversation(
        conversation, owner="o", lease=30
    )
    assert effects.peak == 3
    assert [m.content for m in model.prompts[1][-3:]] == ["found q0", "found q1", "found q2"]


async def test_mistakes_are_told_to_the_model_not_raised(database: Database) -> None:
    """An unknown tool and bad arguments come back as errors the model can correct."""
    store, outbound, effects = Store(database), RecordingOutbound(), Effects()
    model = ScriptedModel(
        _call("teleport", "{}"),
        _call("lookup", '{"query": 5, "x": 1}'),
        _call("lookup", "{not json"),
        "gave up",
    )
    conversation = await _say(store, "go")
    await _runner(store, model, outbound, effects).run_conversation(
        conversation, owner="o", lease=30
    )
    results = [model.prompts[i][-1].content for i in (1, 2, 3)]
    assert "unknown tool 'teleport'; available: charge, lookup" in results[0]
    assert "invalid_arguments" in results[1]
    assert "x: Extra inputs are not permitted" in results[1]
    assert "not valid JSON" in results[2]
    assert _replies(outbound) == ["gave up"]
    assert effects.calls == []


async def test_a_denied_call_is_a_result_not_an_error(database: Database) -> None:
    """Policy deny: the tool never runs and the model reads why."""
    store, outbound, effects = Store(database), RecordingOutbound(), Effects()
    model = ScriptedModel(_call("charge", '{"amount": 5}'), "ok, I won't")
    conversation = await _say(store, "pay")
    rules = [PolicyRule(tool="charge", decision="deny")]
    await _runner(store, model, outbound, effects, rules=rules).run_conversation(
        conversation, owner="o", lease=30
    )
    assert effects.calls == []
    assert "permission denied" in model.prompts[1][-1].content
    assert _replies(outbound) == ["ok, I won't"]


async def test_an_approval_waits_in_the_database_and_resumes_once(database: Database) -> None:
    """ask -> prompt -> the turn waits (nothing running) -> Approve -> the tool runs once."""
    store, outbound, effects = Store(database), RecordingOutbound(), Effects()
    model = ScriptedModel(_call("charge", '{"amount": 5}'), "Charged.")
    conversation = await _say(store, "pay 5")
    runner = _runner(store, model, outbound, effects)
    await runner.run_conversation(conversation, owner="o", lease=30)
    (prompt,) = _prompts(outbound)
    assert (prompt.tool, prompt.arguments, prompt.requested_by) == (
        "charge",
        {"amount": 5},
        "web:ann",
    )
    assert len(prompt.approval_id) <= 20
    assert effects.calls == []
    assert (await store.load_turn(1)).status == "waiting"
    assert await store.conversations_needing_work() == []

    approvals = Approvals(store, outbound, admins=["web:admin"])
    with pytest.raises(NotAllowedToDecide):
        await approvals.decide(prompt.approval_id, decision="approve", user="web:mallory")
    assert (await store.approval(prompt.approval_id)).status == "pending"  # type: ignore[union-attr]
    decided = await approvals.decide(prompt.approval_id, decision="approve", user="web:ann")
    assert decided.status == "approved"
    with pytest.raises(AlreadyDecided):
        await approvals.decide(prompt.approval_id, decision="deny", user="web:admin")
    assert [e.text for e in outbound.edits] == ["web:ann approved charge"]

    fresh = _runner(store, model, RecordingOutbound(), effects)  # as after a restart
    await fresh.run_conversation(conversation, owner="o2", lease=30)
    assert effects.calls == [("charge", "1:3")]
    assert (await store.load_turn(1)).status == "done"


async def test_simultaneous_presses_decide_once(database: Database) -> None:
    """Two presses at once: one wins, the other is told it was already decided."""
    store, outbound, effects = Store(database), RecordingOutbound(), Effects()
    model = ScriptedModel(_call("charge", '{"amount": 1}'), "ok")
    conversation = await _say(store, "pay")
    await _runner(store, model, outbound, effects).run_conversation(
        conversation, owner="o", lease=30
    )
    (prompt,) = _prompts(outbound)
    approvals = Approvals(store, outbound, admins=["web:admin"])
    results = await asyncio.gather(
        approvals.decide(prompt.approval_id, decision="approve", user="web:ann"),
        approvals.decide(prompt.approval_id, decision="deny", user="web:admin"),
        return_exceptions=True,
    )
    assert sum(isinstance(r, AlreadyDecided) for r in results) == 1


async def test_allow_in_this_conversation_stops_asking(database: Database) -> None:
    """After 'Allow in this conversation' the same tool runs there without a prompt."""
    store, outbound, effects = Store(database), RecordingOutbound(), Effects()
    model = ScriptedModel(
        _call("charge", '{"amount": 1}'), "one", _call("charge", '{"amount": 2}', "c2"), "two"
    )
    conversation = await _say(store, "pay 1")
    runner = _runner(store, model, outbound, effects)
    await runner.run_conversation(conversation, owner="o", lease=30)
    (prompt,) = _prompts(outbound)
    await Approvals(store, outbound, admins=[]).decide(
        prompt.approval_id, decision="allow_conversation", user="web:ann"
    )
    await _say(store, "pay 2", event="e2")
    await runner.run_conversation(conversation, owner="o", lease=30)
    assert len(_prompts(outbound)) == 1
    assert [c[0] for c in effects.calls] == ["charge", "charge"]
    assert _replies(outbound) == ["one", "two"]


async def test_allow_in_this_conversation_covers_only_the_person_who_pressed_it(
    database: Database,
) -> None:
    """In a shared conversation Ann's grant lets Ann's later calls run; Bob's still ask."""
    store, outbound, effects = Store(database), RecordingOutbound(), Effects()
    model = ScriptedModel(
        _call("charge", '{"amount": 1}'),
        "one",
        _call("charge", '{"amount": 2}', "c2"),  # Bob's: waits for a decision
        _call("charge", '{"amount": 3}', "c3"),
        "three",
    )
    conversation = await _say(store, "pay 1")
    runner = _runner(store, model, outbound, effects)
    await runner.run_conversation(conversation, owner="o", lease=30)
    (prompt,) = _prompts(outbound)
    await Approvals(store, outbound, admins=[]).decide(
        prompt.approval_id, decision="allow_conversation", user="web:ann"
    )
    await runner.run_conversation(conversation, owner="o", lease=30)
    await _say(store, "pay 2", event="e2", user="web:bob")
    await runner.run_conversation(conversation, owner="o", lease=30)
    assert len(_prompts(outbound)) == 2  # Bob is asked
    assert [c[0] for c in effects.calls] == ["charge"]
    await _say(store, "pay 3", event="e3")
    await runner.run_conversation(conversation, owner="o", lease=30)
    assert len(_prompts(outbound)) == 2  # Ann is not (Bob's turn still waits)
    assert len(effects.calls) == 2


async def test_an_expired_approval_tells_the_model_and_the_user(database: Database) -> None:
    """Nobody answers in time: the turn resumes with a denial; the prompt says it expired."""
    store, outbound, effects = Store(database), RecordingOutbound(), Effects()
    model = ScriptedModel(_call("charge", '{"amount": 1}'), "Nobody approved, so I did not pay.")
    conversation = await _say(store, "pay")
    runner = _runner(store, model, outbound, effects, ttl=0.05)
    await runner.run_conversation(conversation, owner="o", lease=30)
    await asyncio.sleep(0.1)
    expired = await Approvals(store, outbound, admins=[]).expire_due()
    assert [a.status for a in expired] == ["expired"]
    assert "expired" in outbound.edits[0].text
    await runner.run_conversation(conversation, owner="o", lease=30)
    assert effects.calls == []
    assert "expired" in model.prompts[1][-1].content
    assert _replies(outbound) == ["Nobody approved, so I did not pay."]
    notes = [m.text for m in await store.messages_after(conversation) if m.role == "system"]
    assert any("expired" in note for note in notes)


async def test_an_approval_passed_on_is_not_expired_by_another_process(
    database: Database,
) -> None:
    """``escalate_to``: one process passes the overdue approval on (it waits again, the
    escalated person in its approvers); another process that found it overdue a moment
    before cannot expire it, and its own pass finds nothing left to pass on."""
    store, outbound, effects = Store(database), RecordingOutbound(), Effects()
    # (A person on another platform than the conversation's is not reached by DM.)
    rules = [PolicyRule(tool="charge", decision="ask", escalate_to=["web:boss", "slack:U0HEAD"])]
    model = ScriptedModel(_call("charge", '{"amount": 1}'))
    conversation = await _say(store, "pay")
    runner = _runner(store, model, outbound, effects, rules=rules, ttl=0.05)
    await runner.run_conversation(conversation, owner="o", lease=30)
    await asyncio.sleep(0.1)
    [due] = await store.due_approvals()
    assert await Approvals(store, outbound, admins=[]).expire_due() == []  # passed on
    # The other process, going by the list it read before, expires what it found due.
    stale = await store.decide_approval(due, status="expired", user="chatgate", note="late")
    assert stale is None
    assert await Approvals(store, outbound, admins=[]).expire_due() == []
    passed = await store.approval(due)
    assert passed is not None
    assert passed.status == "pending"
    assert (passed.approvers, passed.escalate_to) == (("web:boss", "slack:U0HEAD"), ())
    assert passed.expires_at > utcnow()
    [copy] = [p for p in _prompts(outbound) if p.conversation.channel.startswith("dm-")]
    assert (copy.conversation.channel, copy.approval_id, copy.always_allow) == (
        "dm-boss",
        due,
        False,
    )


async def test_an_unknown_outcome_is_not_re_run_without_asking(database: Database) -> None:
    """A non-idempotent call journaled as started (crash mid-call) is not repeated: the user
    is asked to Retry or Skip; Retry runs it once more."""
    store, outbound, effects = Store(database), RecordingOutbound(), Effects()
    model = ScriptedModel("Done.")
    conversation = await _say(store, "pay")
    rules = [PolicyRule(tool="charge", decision="allow")]
    runner = _runner(store, model, outbound, effects, rules=rules)
    await _crashed_mid_call(store, "charge", '{"amount": 9}')
    await runner.run_conversation(conversation, owner="o", lease=30)
    assert effects.calls == []
    (prompt,) = _prompts(outbound)
    assert (await store.load_turn(1)).step(3).status == "ambiguous"  # type: ignore[union-attr]
    await Approvals(store, outbound, admins=[]).decide(
        prompt.approval_id, decision="approve", user="web:ann"
    )
    await runner.run_conversation(conversation, owner="o", lease=30)
    assert effects.calls == [("charge", "1:3")]
    assert _replies(outbound) == ["Done."]


async def test_skip_leaves_an_unknown_outcome_alone(database: Database) -> None:
    """Skip: the call is not repeated and the model is told why."""
    store, outbound, effects = Store(database), RecordingOutbound(), Effects()
    model = ScriptedModel("Skipped it.")
    conversation = await _say(store, "pay")
    runner = _runner(
        store, model, outbound, effects, rules=[PolicyRule(tool="charge", decision="allow")]
    )
    await _crashed_mid_call(store, "charge", '{"amount": 9}')
    await runner.run_conversation(conversation, owner="o", lease=30)
    (prompt,) = _prompts(outbound)
    await Approvals(store, outbound, admins=[]).decide(
        prompt.approval_id, decision="deny", user="web:ann"
    )
    await runner.run_conversation(conversation, owner="o", lease=30)
    assert effects.calls == []
    assert "chose to skip" in model.prompts[0][-1].content
    assert _replies(outbound) == ["Skipped it."]


async def test_an_idempotent_call_is_re_run_with_the_same_key(database: Database) -> None:
    """A started idempotent call is simply run again, with its original idempotency key."""
    store, outbound, effects = Store(database), RecordingOutbound(), Effects()
    model = ScriptedModel("Found it.")
    conversation = await _say(store, "find")
    await _crashed_mid_call(store, "lookup", '{"query": "x"}')
    await _runner(store, model, outbound, effects).run_conversation(
        conversation, owner="o", lease=30
    )
    assert effects.calls == [("lookup", "1:3")]
    assert _replies(outbound) == ["Found it."]


async def test_secret_values_never_reach_the_model(database: Database) -> None:
    """A tool that returns a configured secret's value: the model reads [secret:NAME]."""
    store, outbound, effects = Store(database), RecordingOutbound(), Effects()
    model = ScriptedModel(_call("lookup", '{"query": "leak"}'), "ok")
    conversation = await _say(store, "go")
    await _runner(store, model, outbound, effects).run_conversation(
        conversation, owner="o", lease=30
    )
    everything = repr(model.prompts)
    assert "s3cr3t-value" not in everything
    assert "[secret:TOKEN]" in everything


async def test_the_step_limit_ends_a_looping_turn(database: Database) -> None:
    """A model that keeps calling tools is stopped at the step limit with a clear reply."""
    store, outbound, effects = Store(database), RecordingOutbound(), Effects()
    loops: list[Any] = [_call("lookup", '{"query": "again"}', f"c{i}") for i in range(10)]
    model = ScriptedModel(*loops)
    conversation = await _say(store, "loop")
    await _runner(store, model, outbound, effects, max_steps=3).run_conversation(
        conversation, owner="o", lease=30
    )
    assert len(model.prompts) == 3
    assert "stopped after 3 model calls" in _replies(outbound)[0]
    assert (await store.load_turn(1)).status == "failed"


async def test_many_approvals_in_one_turn_do_not_count_as_failures(database: Database) -> None:
    """Six approvals in a row (more than max_attempts) still end in the model's answer."""
    store, outbound, effects = Store(database), RecordingOutbound(), Effects()
    calls = [_call("charge", f'{{"amount": {i}}}', f"c{i}") for i in range(6)]
    model = ScriptedModel(*calls, "All six charged.")
    conversation = await _say(store, "charge six times")
    runner = _runner(store, model, outbound, effects)
    approvals = Approvals(store, outbound, admins=[])
    for _ in range(6):
        await runner.run_conversation(conversation, owner="o", lease=30)
        prompt = _prompts(outbound)[-1]
        await approvals.decide(prompt.approval_id, decision="approve", user="web:ann")
    await runner.run_conversation(conversation, owner="o", lease=30)
    assert len(effects.calls) == 6
    assert _replies(outbound) == ["All six charged."]


class _QuickPresser(RecordingOutbound):
    """A person who presses Approve the moment the prompt shows, before its receipt is
    stored (the web chat shows it as soon as it is in the database)."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.approvals = Approvals(store, self, admins=[])

    async def send(  # type: ignore[override]
        self, message: Reply | ApprovalPrompt, *, progress: ChunkSent | None = None
    ) -> str:
        receipt = await super().send(message)
        if isinstance(message, ApprovalPrompt):
            await self.approvals.decide(message.approval_id, decision="approve", user="web:ann")
        return receipt


async def test_an_approval_decided_before_the_turn_waits_lets_it_go_on(
    database: Database,
) -> None:
    """Found by the scale-out soak: a decision landing between the prompt and the turn's
    suspension resumed nothing (the turn was not waiting yet), and the turn then waited
    for good. Now the suspension sees the decision and the turn goes on at once."""
    store, effects = Store(database), Effects()
    outbound = _QuickPresser(store)
    model = ScriptedModel(_call("charge", '{"amount": 5}'), "Charged.")
    conversation = await _say(store, "pay 5")
    await _runner(store, model, outbound, effects).run_conversation(
        conversation, owner="o", lease=30
    )
    assert effects.calls == [("charge", "1:3")]
    assert (await store.load_turn(1)).status == "done"
    assert _replies(outbound)[-1] == "Charged."
    # The decision is announced (the prompt's receipt was not stored yet when it came).
    assert any("web:ann approved charge" in text for text in _replies(outbound))


async def test_a_call_too_long_to_show_whole_is_not_put_to_anyone(database: Database) -> None:
    """Nobody is asked to approve what the prompt could not show whole: the model is told to
    shorten it, and nothing runs."""
    store, outbound, effects = Store(database), RecordingOutbound(), Effects()
    long_amount = "1" * 1600
    model = ScriptedModel(_call("charge", f'{{"amount": {long_amount}}}'), "I will split it.")
    conversation = await _say(store, "pay a lot")
    await _runner(store, model, outbound, effects).run_conversation(
        conversation, owner="o", lease=30
    )
    assert _prompts(outbound) == []
    assert effects.calls == []
    told = model.prompts[1][-1].content
    assert "too long to show whole in an approval prompt" in str(told)
    assert _replies(outbound) == ["I will split it."]


async def test_self_approve_off_needs_a_person_on_another_platform_for_a_web_request(
    database: Database,
) -> None:
    """Every web name is the web chat's one principal; an admin on Slack decides."""
    store, outbound, effects = Store(database), RecordingOutbound(), Effects()
    rules = [PolicyRule(tool="charge", decision="ask", self_approve=False)]
    model = ScriptedModel(_call("charge", '{"amount": 1}'), "paid")
    conversation = await _say(store, "pay")
    runner = _runner(store, model, outbound, effects, rules=rules)
    await runner.run_conversation(conversation, owner="o", lease=30)
    (prompt,) = _prompts(outbound)
    approvals = Approvals(store, outbound, admins=["web:boss", "slack:U0ADMIN"])
    for user in ("web:ann", "web:boss"):
        with pytest.raises(NotAllowedToDecide):
            await approvals.decide(prompt.approval_id, decision="approve", user=user)
    await approvals.decide(prompt.approval_id, decision="approve", user="slack:U0ADMIN")
    await runner.run_conversation(conversation, owner="o", lease=30)
    assert [c[0] for c in effects.calls] == ["charge"]


async def test_a_rule_with_always_allow_off_offers_no_conversation_grant(
    database: Database,
) -> None:
    """``always_allow = false``: the prompt has no "Allow in this conversation", and that
    decision (a stale button, a typed one) approves this call only: the next asks again."""
    store, outbound, effects = Store(database), RecordingOutbound(), Effects()
    model = ScriptedModel(
        _call("charge", '{"amount": 1}'), "one", _call("charge", '{"amount": 2}', "c2"), "two"
    )
    conversation = await _say(store, "pay 1")
    rules = [PolicyRule(tool="charge", decision="ask", always_allow=False)]
    runner = _runner(store, model, outbound, effects, rules=rules)
    await runner.run_conversation(conversation, owner="o", lease=30)
    (prompt,) = _prompts(outbound)
    assert prompt.always_allow is False
    decided = await Approvals(store, outbound, admins=[]).decide(
        prompt.approval_id, decision="allow_conversation", user="web:ann"
    )
    assert decided.status == "approved"
    await runner.run_conversation(conversation, owner="o", lease=30)
    await _say(store, "pay 2", event="e2")
    await runner.run_conversation(conversation, owner="o", lease=30)
    assert len(_prompts(outbound)) == 2
    assert [c[0] for c in effects.calls] == ["charge"]


async def test_a_rules_timeout_sets_how_long_its_approval_waits(database: Database) -> None:
    store, outbound, effects = Store(database), RecordingOutbound(), Effects()
    model = ScriptedModel(_call("charge", '{"amount": 1}'), "one")
    conversation = await _say(store, "pay 1")
    rules = [
        PolicyRule(tool="charge", decision="ask", timeout=10),
        PolicyRule(tool="*", decision="ask", timeout=90),
    ]
    before = utcnow()
    await _runner(store, model, outbound, effects, rules=rules, ttl=3600).run_conversation(
        conversation, owner="o", lease=30
    )
    (prompt,) = _prompts(outbound)
    approval = await store.approval(prompt.approval_id)
    assert approval is not None
    waits = (approval.expires_at - before).total_seconds()
    assert 600 <= waits < 610  # the shortest matching rule's, not the setting's hour

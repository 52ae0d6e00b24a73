"""Turns: one model call and one reply each, resumed from the journal without repeats."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from agent_core.errors import LeaseLost, ModelError
from agent_core.events import InboundMessage
from agent_core.loop import TurnRunner
from agent_core.model_step import NO_MODEL_REPLY
from agent_core.storage import ledger
from agent_core.storage.database import Database
from agent_core.storage.store import Store
from agent_core.testing import RecordingOutbound, ScriptedModel, turn_runner


def _message(event_id: str, text: str) -> InboundMessage:
    return InboundMessage(
        platform="web",
        workspace="local",
        channel="c",
        user="web:local",
        text=text,
        platform_event_id=event_id,
    )


def _runner(store: Store, model: ScriptedModel | None, outbound: RecordingOutbound) -> TurnRunner:
    return turn_runner(store, model=model, outbound=outbound, system_prompt="be brief")


async def test_a_turn_calls_the_model_and_delivers_the_reply(database: Database) -> None:
    """System prompt + history + message go to the model; the reply is stored and sent."""
    store, model, outbound = Store(database), ScriptedModel("first answer"), RecordingOutbound()
    runner = _runner(store, model, outbound)
    one = await store.accept_inbound(_message("1", "question one"))
    await store.accept_inbound(_message("2", "question two"))
    assert await runner.run_conversation(one.conversation_id, owner="me", lease=30) == 2
    assert [m.content for m in model.prompts[1]] == [
        "be brief",
        "question one",
        "first answer",
        "question two",
    ]
    assert [r.text for r in outbound.sent] == ["first answer", "echo: question two"]
    assert outbound.sent[0].idempotency_key == f"{one.turn_id}:2"
    items = await store.messages_after(one.conversation_id)
    assert [m.role for m in items] == ["user", "user", "assistant", "assistant"]
    assert (await store.load_turn(one.turn_id)).status == "done"


async def test_a_lane_takes_its_next_turn_with_the_receipt(database: Database) -> None:
    """Two turns in a row: each reply's receipt is journaled in the transaction that starts
    the next turn, or, after the last, gives the lease up; four writes a turn in all."""
    store, model, outbound = Store(database), ScriptedModel(), RecordingOutbound()
    one = await store.accept_inbound(_message("1", "question one"))
    await store.accept_inbound(_message("2", "question two"))
    writes: list[str] = []
    database.on_commit = lambda name, _seconds: writes.append(name)
    runner = _runner(store, model, outbound)
    assert await runner.run_conversation(one.conversation_id, owner="me", lease=30) == 2
    assert writes == [
        "claim_and_begin",
        "model_call_started",
        "reply_intent",
        "reply_sent_and_next",
        "model_call_started",
        "reply_intent",
        "reply_sent_and_next",
    ]
    assert [r.text for r in outbound.sent] == ["echo: question one", "echo: question two"]
    # The lease was given up: another process takes it at once (and finds nothing to run).
    assert await store.claim_and_begin(one.conversation_id, owner="other", ttl=30) == (True, None)


async def test_resume_after_model_call_does_not_call_the_model_again(database: Database) -> None:
    """A journaled model result is reused when the turn resumes."""
    store, outbound = Store(database), RecordingOutbound()
    accepted = await store.accept_inbound(_message("1", "hi"))
    await store.begin_step(accepted.turn_id, 1, kind="model_call", input={})
    await store.finish_step(
        accepted.turn_id,
        1,
        kind="model_call",
        status="done",
        output={"role": "assistant", "text": "stored answer"},
    )
    model = ScriptedModel()
    await _runner(store, model, outbound).run_turn(await store.start_turn(accepted.turn_id))
    assert model.prompts == []
    assert [r.text for r in outbound.sent] == ["stored answer"]


async def test_started_model_call_is_redone(database: Database) -> None:
    """A model call with no recorded result (crash mid-call) is made again."""
    store, outbound, model = Store(database), RecordingOutbound(), ScriptedModel("fresh")
    accepted = await store.accept_inbound(_message("1", "hi"))
    await store.begin_step(accepted.turn_id, 1, kind="model_call", input={})
    await _runner(store, model, outbound).run_turn(await store.start_turn(accepted.turn_id))
    assert len(model.prompts) == 1
    assert [r.text for r in outbound.sent] == ["fresh"]


async def test_reply_without_receipt_is_resent_once_with_the_same_key(database: Database) -> None:
    """Intent journaled, send unknown: resend with the same idempotency key, one message."""
    store, model = Store(database), ScriptedModel("answer")
    accepted = await store.accept_inbound(_message("1", "hi"))
    first = RecordingOutbound()
    runner = _runner(store, model, first)
    turn = await store.start_turn(accepted.turn_id)
    await store.begin_step(turn.id, 1, kind="model_call", input={})
    await store.finish_step(
        turn.id, 1, kind="model_call", status="done", output={"role": "assistant", "text": "a"}
    )
    await store.record_reply_intent(
        turn, 2, role="assistant", text="a", delivery_key=f"{turn.id}:2"
    )
    second = RecordingOutbound()
    runner = _runner(store, model, second)
    await runner.run_turn(await store.start_turn(turn.id))
    assert [(r.text, r.idempotency_key) for r in second.sent] == [("a", f"{turn.id}:2")]
    items = await store.messages_after(accepted.conversation_id)
    assert [m.role for m in items] == ["user", "assistant"]
    assert items[1].platform_message_id == "receipt-1"
    assert model.prompts == []


async def test_finished_turn_is_not_run_again(database: Database) -> None:
    """A conversation with only finished turns runs nothing."""
    store, outbound = Store(database), RecordingOutbound()
    accepted = await store.accept_inbound(_message("1", "hi"))
    runner = _runner(store, ScriptedModel(), outbound)
    await runner.run_conversation(accepted.conversation_id, owner="me", lease=30)
    assert await runner.run_conversation(accepted.conversation_id, owner="me", lease=30) == 0
    assert len(outbound.sent) == 1


async def test_no_model_configured_says_which_setting(database: Database) -> None:
    """Without a model the reply names CHATGATE_MODEL."""
    store, outbound = Store(database), RecordingOutbound()
    accepted = await store.accept_inbound(_message("1", "hi"))
    status = await _runner(store, None, outbound).run_turn(await store.start_turn(accepted.turn_id))
    assert status == "failed"
    assert outbound.sent[0].text == NO_MODEL_REPLY
    assert "CHATGATE_MODEL" in NO_MODEL_REPLY
    items = await store.messages_after(accepted.conversation_id)
    assert items[-1].role == "system"


async def test_model_failure_is_told_to_the_user(database: Database) -> None:
    """When every model try fails, the user gets a clear message and the turn ends."""
    store, outbound = Store(database), RecordingOutbound()
    accepted = await store.accept_inbound(_message("1", "hi"))
    model = ScriptedModel(ModelError("openai/x: 503 overloaded"))
    status = await _runner(store, model, outbound).run_turn(
        await store.start_turn(accepted.turn_id)
    )
    assert status == "failed"
    assert "could not be reached" in outbound.sent[0].text
    assert "503 overloaded" in outbound.sent[0].text


async def test_another_lease_holder_keeps_us_out(database: Database) -> None:
    """While another process holds the conversation, this one runs nothing."""
    store, outbound = Store(database), RecordingOutbound()
    accepted = await store.accept_inbound(_message("1", "hi"))
    assert await _claim(store, accepted.conversation_id, owner="other", ttl=30)
    runner = _runner(store, ScriptedModel(), outbound)
    assert await runner.run_conversation(accepted.conversation_id, owner="me", lease=30) == 0
    assert outbound.sent == []


class _BrokenModel(ScriptedModel):
    """A model port whose implementation has a bug: it raises something unexpected."""

    async def complete(self, messages, *, max_tokens, tools=(), on_text=None):  # type: ignore[no-untyped-def]
        self.prompts.append(list(messages))
        raise RuntimeError("bug in a model adapter")


async def _die_after(store: Store, conversation_id: str, steps: int) -> int:
    """One attempt of the conversation's turn in a process that dies after journaling
    ``steps`` more steps (the last one only started); its stalls count, as the claim saw."""
    claimed, turn = await store.claim_and_begin(conversation_id, owner="dead", ttl=30)
    assert claimed
    assert turn is not None
    seq = max((step.seq for step in turn.steps), default=0)
    for _ in range(steps):
        if turn.step(seq) is not None:
            await store.finish_step(turn.id, seq, kind="tool_call", status="done", output={})
        seq += 1
        await store.begin_step(turn.id, seq, kind="tool_call", input={})
    await store.release_lease(conversation_id, owner="dead")
    return turn.stalls


async def test_kills_between_which_the_turn_made_progress_do_not_use_it_up(
    database: Database,
) -> None:
    """Twelve deaths in a row, each after the turn got further: the next attempt runs it
    (stalls are counted at the same place only); a death at the place of the one before
    counts one more."""
    store, outbound = Store(database), RecordingOutbound()
    runner = turn_runner(store, model=ScriptedModel(), outbound=outbound, system_prompt="s")
    accepted = await store.accept_inbound(_message("1", "long task"))
    assert [await _die_after(store, accepted.conversation_id, 1) for _ in range(12)] == [
        0,
        *[1] * 11,
    ]
    assert await _die_after(store, accepted.conversation_id, 0) == 1
    assert await _die_after(store, accepted.conversation_id, 0) == 2
    assert await _die_after(store, accepted.conversation_id, 1) == 3
    assert await runner.run_conversation(accepted.conversation_id, owner="me", lease=30) == 1
    turn = await store.load_turn(accepted.turn_id)
    assert (turn.status, turn.error) == ("done", None)
    assert not any("failed" in reply.text for reply in outbound.sent)


async def test_a_turn_that_dies_at_the_same_step_every_time_is_given_up(
    database: Database,
) -> None:
    """A step that kills its process every time: five attempts end there, and the sixth
    tells the user instead of trying again."""
    store, outbound = Store(database), RecordingOutbound()
    runner = turn_runner(store, model=ScriptedModel(), outbound=outbound, system_prompt="s")
    accepted = await store.accept_inbound(_message("1", "poison"))
    await _die_after(store, accepted.conversation_id, 2)
    assert [await _die_after(store, accepted.conversation_id, 0) for _ in range(4)] == [
        1,
        2,
        3,
        4,
    ]
    assert await runner.run_conversation(accepted.conversation_id, owner="me", lease=30) == 1
    turn = await store.load_turn(accepted.turn_id)
    assert turn.status == "failed"
    assert "failed 5 times in a row" in outbound.sent[0].text


async def test_a_turn_that_keeps_failing_is_given_up_and_the_user_told(
    database: Database,
) -> None:
    """After max_attempts failures the user gets a message and the next turn can run."""
    store, outbound, model = Store(database), RecordingOutbound(), _BrokenModel()
    runner = turn_runner(store, model=model, outbound=outbound, system_prompt="s", max_attempts=3)
    first = await store.accept_inbound(_message("1", "poison"))
    for _ in range(3):
        with pytest.raises(RuntimeError):
            await runner.run_conversation(first.conversation_id, owner="me", lease=30)
    second = await store.accept_inbound(_message("2", "fine"))
    runner = turn_runner(
        store, model=ScriptedModel(), outbound=outbound, system_prompt="s", max_attempts=3
    )
    assert await runner.run_conversation(first.conversation_id, owner="me", lease=30) == 2
    assert len(model.prompts) == 3
    assert "failed 3 times" in outbound.sent[0].text
    assert outbound.sent[1].text == "echo: fine"
    turn = await store.load_turn(first.turn_id)
    assert turn.status == "failed"
    assert (await store.load_turn(second.turn_id)).status == "done"


class _SlowModel(ScriptedModel):
    """Takes a second to answer."""

    async def complete(self, messages, *, max_tokens, tools=(), on_text=None):  # type: ignore[no-untyped-def]
        await asyncio.sleep(1)
        return await super().complete(messages, max_tokens=max_tokens, tools=tools, on_text=on_text)


async def test_losing_the_lease_stops_the_turn_before_it_replies(database: Database) -> None:
    """If another process takes the conversation over, this one stops and sends nothing;
    the turn stays open for the new holder."""
    store, outbound = Store(database), RecordingOutbound()
    accepted = await store.accept_inbound(_message("1", "hi"))
    runner = turn_runner(store, model=_SlowModel(), outbound=outbound, system_prompt="s")
    running = asyncio.create_task(
        runner.run_conversation(accepted.conversation_id, owner="me", lease=0.6)
    )
    await asyncio.sleep(0.1)
    await store.release_lease(accepted.conversation_id, owner="me")
    assert await _claim(store, accepted.conversation_id, owner="thief", ttl=30)
    with pytest.raises(LeaseLost):
        await running
    assert outbound.sent == []
    assert await store.open_turn_count(accepted.conversation_id) == 1
    assert not await _claim(store, accepted.conversation_id, owner="me", ttl=30)


async def _claim(store: Store, conversation_id: str, *, owner: str, ttl: float) -> bool:
    """Take (or renew) the conversation's lease as another process would."""
    return await store.database.write(ledger.claim, conversation_id, owner=owner, ttl=ttl)


async def test_a_long_reply_is_streamed_to_the_live_reply_then_delivered_once(
    database: Database,
) -> None:
    """Where the platform shows replies as they grow: the model is asked to stream, a reply
    past a screen is shown as it grows, the draft is ended before the reply is delivered,
    and the reply is sent once, whole. A short one is streamed but never shown."""
    store, outbound = Store(database), RecordingOutbound(live_interval=0.0)
    long = " ".join(f"word{i}" for i in range(300))
    model = ScriptedModel(long, "short")
    runner = _runner(store, model, outbound)
    one = await store.accept_inbound(_message("1", "write a lot"))
    await store.accept_inbound(_message("2", "say little"))
    assert await runner.run_conversation(one.conversation_id, owner="me", lease=30) == 2
    assert model.streamed == 2
    assert [r.text for r in outbound.sent] == [long, "short"]
    first, second = outbound.lives
    assert first.key == str(one.turn_id)
    assert first.shown
    assert all(long.startswith(text) for text, _status in first.shown)
    assert len(first.shown[0][0]) >= 800
    assert first.closed
    assert second.shown == []


async def test_the_message_a_reply_is_shown_in_is_journaled_and_the_reply_goes_into_it(
    database: Database,
) -> None:
    """A platform whose live reply posts a message: that message is journaled with the
    turn as soon as it exists, and the reply is delivered into it. A turn cut off mid-
    stream (its model call never finished) is resumed in the same message: the new live
    reply is handed it, and the reply goes into it; no second message is posted."""
    store = Store(database)
    long = " ".join(f"word{i}" for i in range(300))
    first = RecordingOutbound(live_interval=0.0, live_posts=True)
    accepted = await store.accept_inbound(_message("1", "write a lot"))
    await _runner(store, ScriptedModel(long), first).run_turn(
        await store.start_turn(accepted.turn_id)
    )
    (live,) = first.lives
    assert live.message == f"live-{accepted.turn_id}"
    assert (await store.load_turn(accepted.turn_id)).live_message == live.message
    assert [(r.text, r.live_message) for r in first.sent] == [(long, live.message)]

    # The next turn dies mid-stream: its message is journaled, its model call is not done.
    second = await store.accept_inbound(_message("2", "again"))
    turn = await store.start_turn(second.turn_id)
    await store.begin_step(turn.id, 1, kind="model_call", input={})
    await store.record_live_message(turn.id, "live-from-the-dead-attempt")
    resumed = RecordingOutbound(live_interval=0.0, live_posts=True)
    await _runner(store, ScriptedModel(long), resumed).run_turn(await store.start_turn(turn.id))
    (again,) = resumed.lives
    assert again.resumed_in == "live-from-the-dead-attempt"
    assert again.message == "live-from-the-dead-attempt"
    assert [r.live_message for r in resumed.sent] == ["live-from-the-dead-attempt"]
    items = await store.messages_after(accepted.conversation_id)
    assert [m.role for m in items] == ["user", "assistant", "user", "assistant"]


class _HeldModel(ScriptedModel):
    """Answers only once ``release`` is set (a model that takes its time)."""

    def __init__(self, *answers: str) -> None:
        super().__init__(*answers)
        self.release = asyncio.Event()
        self.called = asyncio.Event()

    async def complete(self, messages, *, max_tokens, tools=(), on_text=None):  # type: ignore[no-untyped-def]
        self.called.set()
        await self.release.wait()
        return await super().complete(messages, max_tokens=max_tokens, tools=tools)


async def test_stop_cuts_a_model_call_short_and_the_turn_says_who_stopped_it(
    database: Database,
) -> None:
    """``stop`` told in this process: the model call under way is cut, the turn ends failed
    with "Stopped by ..." (journaled as its error), and the next turn runs as usual."""
    store, outbound, model = Store(database), RecordingOutbound(), _HeldModel()
    runner = _runner(store, model, outbound)
    one = await store.accept_inbound(_message("1", "take your time"))
    running = asyncio.create_task(
        runner.run_conversation(one.conversation_id, owner="me", lease=30)
    )
    await model.called.wait()
    asked = await store.request_stop(one.conversation_id, "web:boss")
    assert asked is not None
    assert (asked.turn_id, asked.status, asked.by) == (one.turn_id, "running", "web:boss")
    assert runner.stop(asked.turn_id, by=asked.by)
    await asyncio.wait_for(running, 5)
    assert [r.text for r in outbound.sent] == ["Stopped by web:boss."]
    stopped = await store.load_turn(one.turn_id)
    assert (stopped.status, stopped.error) == ("failed", "stopped by web:boss")
    assert [(s.kind, s.status) for s in stopped.steps] == [
        ("model_call", "started"),
        ("reply", "done"),
    ]
    model.release.set()
    two = await store.accept_inbound(_message("2", "and now?"))
    await runner.run_conversation(two.conversation_id, owner="me", lease=30)
    assert [r.text for r in outbound.sent][-1] == "echo: and now?"
    assert await store.request_stop(one.conversation_id, "web:boss") is None


async def test_stop_asked_through_the_journal_reaches_a_running_turn(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``stop`` said through another process (only the journal knows): the running turn
    reads it while it runs and stops; one model call, no answer from it."""
    monkeypatch.setattr("agent_core.turn_stop.POLL_SECONDS", 0.05)
    store, outbound, model = Store(database), RecordingOutbound(), _HeldModel()
    runner = _runner(store, model, outbound)
    one = await store.accept_inbound(_message("1", "take your time"))
    running = asyncio.create_task(
        runner.run_conversation(one.conversation_id, owner="me", lease=30)
    )
    await model.called.wait()
    await store.request_stop(one.conversation_id, "slack:U0OTHER")
    await asyncio.wait_for(running, 5)
    assert [r.text for r in outbound.sent] == ["Stopped by slack:U0OTHER."]
    assert len(model.prompts) == 0  # the held call never answered


async def test_a_turn_asked_to_stop_before_it_runs_makes_no_model_call(
    database: Database,
) -> None:
    store, outbound, model = Store(database), RecordingOutbound(), ScriptedModel("never")
    one = await store.accept_inbound(_message("1", "queued"))
    await store.request_stop(one.conversation_id, "web:local")
    await _runner(store, model, outbound).run_conversation(
        one.conversation_id, owner="me", lease=30
    )
    assert model.prompts == []
    assert [r.text for r in outbound.sent] == ["Stopped by web:local."]


async def test_messages_taken_into_a_turn_are_taken_again_when_it_resumes(
    database: Database,
) -> None:
    """A turn that took a later message in (``steer``, ``collect``) and died before its
    model call: resumed (in any busy mode), it sends the model both messages from its
    journal, and the later message's turn, merged, never runs."""
    store, outbound, model = Store(database), RecordingOutbound(), ScriptedModel("both, then")
    one = await store.accept_inbound(_message("1", "first"))
    two = await store.accept_inbound(_message("2", "second"))
    turn = await store.start_turn(one.turn_id)
    assert await store.take_in(turn, 1) == ["second"]
    assert await store.take_in(turn, 2) == []  # nothing waits any more
    runner = _runner(store, model, outbound)
    assert await runner.run_conversation(one.conversation_id, owner="me", lease=30) == 1
    assert [m.content for m in model.prompts[0]][-2:] == ["first", "second"]
    assert [r.text for r in outbound.sent] == ["both, then"]
    merged = await store.load_turn(two.turn_id)
    assert merged.status == "done"
    assert [s.kind for s in (await store.load_turn(one.turn_id)).steps] == [
        "steer",
        "model_call",
        "reply",
    ]


async def test_only_the_turn_s_own_person_s_messages_are_taken_into_it(
    database: Database,
) -> None:
    """A turn acts as its person: another person's message waits for its own turn (and
    keeps its place: the same person's message after it waits too)."""
    store = Store(database)
    one = await store.accept_inbound(_message("1", "mine"))
    await store.accept_inbound(_message("2", "mine too"))
    other = dataclasses.replace(_message("3", "someone else's"), user="web:mallory")
    third = await store.accept_inbound(other)
    await store.accept_inbound(_message("4", "mine again"))
    turn = await store.start_turn(one.turn_id)
    assert await store.take_in(turn, 1) == ["mine too"]
    assert await store.take_in(turn, 2) == []
    assert (await store.load_turn(third.turn_id)).status == "pending"


async def test_a_live_message_about_to_be_posted_is_looked_for_when_the_turn_resumes(
    database: Database,
) -> None:
    """The journal says a live message was about to be posted (``pending``) and never
    got its id (the process died in between): the resumed turn's live reply looks for it,
    the journal gets its id, and the reply goes into it."""
    store = Store(database)
    accepted = await store.accept_inbound(_message("1", "hello"))
    turn = await store.start_turn(accepted.turn_id)
    await store.begin_step(turn.id, 1, kind="model_call", input={})
    await store.record_live_message(turn.id, "pending")
    outbound = RecordingOutbound(live_interval=0.0, live_posts=True)
    await _runner(store, ScriptedModel("short"), outbound).run_turn(await store.start_turn(turn.id))
    (live,) = outbound.lives
    assert live.recovered
    assert live.resumed_in is None  # not handed "pending" as if it were a message
    assert [r.live_message for r in outbound.sent] == [f"live-{turn.id}"]
    assert (await store.load_turn(turn.id)).live_message == f"live-{turn.id}"

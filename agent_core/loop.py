"""Run and resume turns: a journaled state machine, safe to re-enter after a crash.

A turn's journal (``turn_steps``) holds, in order:

    model_call   started -> done (output: text, tool calls, model, token counts)
    for each tool call of that response (see ``agent_core.tool_steps``):
      approval   started = requested -> done = decided (only when policy asked)
      tool_call  started = intent    -> done = result (scrubbed), or ambiguous
    ... more model calls and tool rounds, up to the step limit ...
    reply        started = reply_intent (the reply is in the history)
                 done    = reply_sent   (output: the platform's receipt)

Step numbers follow from the journaled model outputs, so a resumed turn walks the same
path. Running a turn only does what is not yet recorded: a model call that started but
never finished is made again; a tool call is re-run with the same idempotency key
(``turn_id:seq``) only when the tool is idempotent; a reply with an intent but no receipt
is sent again with the same key, which the sender uses to avoid a duplicate.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import structlog

from agent_core import notable, tracing
from agent_core.access import MayTalk
from agent_core.budgets import BudgetLimits
from agent_core.busy_modes import BusyModes
from agent_core.delivery import Outbound
from agent_core.errors import Stopped, Suspended
from agent_core.faults import FaultPoints
from agent_core.files.fetching import Prepared, TurnFiles
from agent_core.history import Past
from agent_core.journaled import ModelCallOutput
from agent_core.live_reply import PENDING, LiveReply, Pacer
from agent_core.model import ChatMessage, Model
from agent_core.model_step import ModelStep
from agent_core.profiles import Profiles
from agent_core.records import BusyMode, FinishedStep, Role, StepStatus, TurnRecord, TurnStatus
from agent_core.reply_step import ReplyStep, known_message
from agent_core.stores import Journal, UsageStore
from agent_core.tool_steps import ToolRound
from agent_core.tools.base import TurnContext
from agent_core.tools.registry import ToolRegistry
from agent_core.tools.selection import Offer
from agent_core.turn_lease import Lane, heartbeat
from agent_core.turn_marks import SessionStatus, TurnMarks
from agent_core.turn_setup import ModelFor, Setup, TurnSetups
from agent_core.turn_stop import RunningTurns, StopSignal, interrupter

log = structlog.get_logger("chatgate.turn")

GAVE_UP_REPLY = (
    "Sorry, I could not answer this message: it failed {attempts} times in a row. "
    "Send it again to retry; the details are in the gateway log."
)
STEP_LIMIT_REPLY = (
    "I stopped after {steps} model calls without reaching an answer. Tell me how to go on, "
    "or narrow the task down."
)


class TurnStore(Journal, UsageStore, Protocol):
    """What the turn runner asks of the storage."""


class TurnObserver(Protocol):
    """Told when turns start and finish (metrics hang off this)."""

    def turn_started(self, turn: TurnRecord) -> None:
        """A turn is about to run (or resume)."""
        ...

    def turn_finished(self, turn: TurnRecord, *, status: TurnStatus | None, seconds: float) -> None:
        """A turn stopped running here: ``status`` is final, or None if it was interrupted."""
        ...

    def model_called(self, turn: TurnRecord, output: ModelCallOutput) -> None:
        """A model call answered: its tokens per context section, tokens and cost."""
        ...


class TurnRunner:
    """Runs a conversation's open turns one at a time, under the conversation's lease."""

    def __init__(
        self,
        store: TurnStore,
        *,
        model: Model | None,
        outbound: Outbound,
        system_prompt: str,
        reply_max_tokens: int = 1024,
        history_limit: int = 200,
        max_attempts: int = 5,
        max_steps: int = 16,
        tools: ToolRegistry,
        tool_round: ToolRound,
        faults: FaultPoints,
        budgets: BudgetLimits,
        observer: TurnObserver | None = None,
        tools_offered: int = 32,
        summarizer: Model | None = None,
        extract_memories: bool = False,
        may_talk: MayTalk | None = None,
        stream_replies: bool = True,
        busy_mode: BusyMode = "queue",
        collect_seconds: float = 3.0,
        show_marks: bool = True,
        files: TurnFiles | None = None,
        profiles: Profiles | None = None,
        models: ModelFor | None = None,
    ) -> None:
        self._store = store
        # What the agent is in each conversation (``[[profile]]``).
        self._setups = TurnSetups(
            store,
            model=model,
            summarizer=summarizer,
            system_prompt=system_prompt,
            reply_max_tokens=reply_max_tokens,
            budgets=budgets,
            profiles=profiles,
            models=models,
        )
        self._stream_replies = stream_replies
        self._busy = BusyModes(store, default=busy_mode, collect_seconds=collect_seconds)
        self._show_marks = show_marks
        self._files = files
        self._running = RunningTurns(store.stop_requested)
        # Asked before a turn that waited goes on: its person may have lost access since.
        self._may_talk = may_talk
        self._tools_offered = tools_offered
        self._reply_step = ReplyStep(store, outbound, faults=faults, extract=extract_memories)
        self._model = model
        self._outbound = outbound
        self._model_step = ModelStep(
            store, history_limit=history_limit, reply_max_tokens=reply_max_tokens,
            observer=observer,
        )  # fmt: skip
        self._max_attempts = max_attempts
        self._max_steps = max_steps
        self._tools = tools
        self._faults = faults
        self._tool_round = tool_round
        self._observer = observer

    async def run_conversation(self, conversation_id: str, *, owner: str, lease: float) -> int:
        """Run every open turn of a conversation in order; return how many finished.

        Returns 0 without running anything when another process holds the lease.
        """
        claimed, turn = await self._store.claim_and_begin(conversation_id, owner=owner, ttl=lease)
        if not claimed:
            log.debug("lease held elsewhere", conversation_id=conversation_id)
            return 0
        if turn is None:
            return 0  # nothing to run; the lease was given back in the same transaction
        log.debug("lease taken", conversation_id=conversation_id)
        finished = 0
        released = False
        try:
            renew = functools.partial(
                self._store.renew_lease, conversation_id, owner=owner, ttl=lease
            )
            async with heartbeat(renew, every=lease / 3, what=conversation_id) as beat:
                lane = Lane(conversation_id, owner, beat)
                while turn is not None:
                    lane.next, lane.taken = None, False
                    await self.run_turn(turn, lane=lane)
                    finished += 1
                    if lane.taken:  # with the reply's receipt (the common case)
                        turn = lane.next
                        continue
                    # The next turn, or the lease given back when there is none (one
                    # transaction); the heartbeat must not take that release for a loss.
                    beat.releasing = True
                    turn = await self._store.next_or_release(conversation_id, owner=owner)
                    beat.releasing = turn is None
                released = True
        finally:
            if not released:
                # The heartbeat has stopped by now, so nothing renews the lease after this.
                await asyncio.shield(self._store.release_lease(conversation_id, owner=owner))
        return finished

    async def run_turn(
        self,
        turn: TurnRecord,
        *,
        retry_errors: bool = False,
        before_step: Callable[[], Awaitable[None]] | None = None,
        lane: Lane | None = None,
    ) -> TurnStatus:
        """Run (or resume) a started turn to its end, doing only what the journal lacks.

        ``turn`` comes from ``Store.begin_next_turn`` or ``Store.start_turn``, which count the
        attempt. A turn whose last ``max_attempts`` attempts all ended at the same place in
        its journal (a bug, or a step that kills the process every time) is given up: the
        user is told, and the conversation moves on. Attempts cut short by kills that had
        nothing to do with it leave it where they find it: it made progress in between.

        With ``retry_errors`` (a queued turn that will be retried later) a model error is
        raised instead of answered with an apology, and the model call stays unfinished in
        the journal so the retry makes it again. ``before_step`` is awaited before each model
        call (background turns use it to give way to interactive ones). With ``lane`` (the
        conversation's lane runs it), the reply's receipt is journaled in one transaction
        with the start of the lane's next turn (``lane.next``) or the lease's release.
        """
        with tracing.span("chatgate.turn", tracing.turn_attributes(turn)) as span:
            status = await self._run_turn(
                turn, retry_errors=retry_errors, before_step=before_step, lane=lane
            )
            span.set({"chatgate.turn.status": status})
            return status

    async def _run_turn(
        self,
        turn: TurnRecord,
        *,
        retry_errors: bool,
        before_step: Callable[[], Awaitable[None]] | None,
        lane: Lane | None,
    ) -> TurnStatus:
        started = time.monotonic()
        if self._observer:
            self._observer.turn_started(turn)
        status: TurnStatus | None = None
        setup, turn = self._setups.for_turn(turn)
        with structlog.contextvars.bound_contextvars(
            turn_id=turn.id,
            conversation_id=turn.conversation_id,
            platform=turn.conversation.platform,
        ):
            log.debug("turn started", attempt=turn.attempts + 1)
            try:
                if turn.stalls >= self._max_attempts:
                    status = await self._give_up(turn)
                    return status
                if await self._lost_access(turn):
                    status = await self._stop_for_access(turn)
                    return status
                live = await self._live(turn, setup)
                pacer = (
                    Pacer(
                        live,
                        posted=functools.partial(self._store.record_live_message, turn.id),
                        faults=self._faults,
                    )
                    if live is not None
                    else None
                )
                marks = (
                    TurnMarks(self._outbound, turn, saved=self._store.record_mark)
                    if self._show_marks
                    else None
                )
                if marks is not None:
                    marks.start()
                session = SessionStatus(self._outbound, turn)
                session.start()
                try:
                    if turn.stop_requested_by is not None:
                        raise Stopped(turn.stop_requested_by, _free_seq(turn))
                    async with self._running.watch(turn.id) as stop:
                        await self._busy.settle(turn)
                        answer = await self._think(
                            turn,
                            setup,
                            pacer,
                            stop,
                            retry_errors=retry_errors,
                            before_step=before_step,
                        )
                except Suspended:
                    log.info("turn waiting for a decision", attempt=turn.attempts + 1)
                    if marks is not None:
                        await marks.end("waiting")
                    await session.end("waiting")
                    return "waiting"
                except Stopped as stopped:
                    log.info("turn stopped", by=stopped.by)
                    newer = interrupter(stopped.by)
                    shown = (live.message if live is not None else None) or known_message(
                        turn.live_message
                    )
                    if newer is not None and shown is None:
                        # Quietly: the newer message's turn answers both (its message is
                        # taken care of: a working mark on it becomes done).
                        error = f"interrupted by a newer message from {newer}"
                        await self._store.finish_turn(turn.id, status="failed", error=error)
                        if marks is not None:
                            await marks.end("done")
                        await session.end("done")
                        status = "failed"
                        return status
                    text, error = (
                        (f"Stopped by {stopped.by}.", f"stopped by {stopped.by}")
                        if newer is None
                        else (
                            "(Interrupted: answering the newer message.)",
                            f"interrupted by a newer message from {newer}",
                        )
                    )
                    answer = _Answer(stopped.next_seq, "system", text, error)
                finally:
                    if pacer is not None:
                        await pacer.close()
                    if marks is not None:
                        await marks.stop()
                if turn.quiet and answer.role == "assistant" and answer.error is None:
                    sifted = notable.sift(answer.text)
                    if not sifted.post:
                        log.info("quiet run: nothing to report", reason=sifted.text)
                        await self._store.record_quiet_answer(
                            turn, answer.seq, report=sifted.text, answered=answer.answered
                        )
                        await session.end("done")
                        status = "done"
                        return status
                    answer = dataclasses.replace(answer, text=sifted.text)
                final: TurnStatus = "failed" if answer.error else "done"
                if marks is not None:
                    await marks.end("failed" if answer.error else "done")
                await self._reply_step(
                    turn,
                    answer.seq,
                    role=answer.role,
                    text=answer.text,
                    status=final,
                    error=answer.error,
                    answered=answer.answered,
                    lane=lane,
                    live_message=(live.message if live else None)
                    or known_message(turn.live_message),
                )
                await session.end("failed" if answer.error else "done")
                status = final
                log.info("turn finished", status=status, error=answer.error, seq=answer.seq)
                return status
            finally:
                if self._observer:
                    seconds = time.monotonic() - started
                    self._observer.turn_finished(turn, status=status, seconds=seconds)

    async def _give_up(self, turn: TurnRecord) -> TurnStatus:
        error = f"gave up after {turn.stalls} attempts that ended at the same step"
        log.error("turn abandoned", attempts=turn.attempts, stalls=turn.stalls)
        if not any(step.kind == "reply" for step in turn.steps):
            text = GAVE_UP_REPLY.format(attempts=turn.stalls)
            seq = max((step.seq for step in turn.steps), default=0) + 1
            try:
                await self._reply_step(
                    turn, seq, role="system", text=text, status="failed", error=error
                )
                return "failed"
            except Exception:
                log.exception("could not tell the user the turn was abandoned")
        await self._store.finish_turn(turn.id, status="failed", error=error)
        return "failed"

    async def _lost_access(self, turn: TurnRecord) -> bool:
        """A person's turn, when they may no longer talk to the agent there: revoked since
        their message was admitted (it may have waited behind other turns, for an approval,
        or for a restart). Queued turns are checked by their job. (Only a person let in by
        pairing costs a lookup: the rest is the policy in memory.)"""
        if self._may_talk is None or turn.queued:
            return False
        if any(step.kind == "reply" for step in turn.steps):
            return False  # only its delivery is left
        return not await self._may_talk(turn.user, turn.conversation)

    async def _stop_for_access(self, turn: TurnRecord) -> TurnStatus:
        log.warning("turn stopped: its person lost access", user=turn.user)
        text = f"Stopped: {turn.user} may no longer use the agent here."
        seq = max((step.seq for step in turn.steps), default=0) + 1
        await self._reply_step(
            turn, seq, role="system", text=text, status="failed", error="no access"
        )
        return "failed"

    def stop(self, turn_id: int, *, by: str) -> bool:
        """Stop a turn this runner runs now, at its next step boundary (False: it runs
        nowhere here; the journal's ``stop_requested_by`` reaches it wherever it runs)."""
        return self._running.stop(turn_id, by=by)

    async def _prepare(self, turn: TurnRecord, model: Model | None) -> Prepared:
        """The turn's message, with the files that came with it (fetched once)."""
        if turn.quiet:  # a scheduled check: it says whether its answer is worth posting
            return Prepared(ChatMessage(role="user", content=notable.ask(turn.trigger_text)))
        if self._files is None or model is None or not turn.has_files:
            return Prepared(ChatMessage(role="user", content=turn.trigger_text))
        await model.warm_up()  # litellm's model map says whether it sees images
        return await self._files.prepare(turn, sees_images=model.sees_images())

    async def _live(self, turn: TurnRecord, setup: Setup) -> LiveReply | None:
        """Where the turn's reply is shown as it is written, if its platform does that;
        the message an earlier attempt posted and did not journal is looked for first."""
        if setup.model is None or not self._stream_replies or turn.quiet:
            return None  # (a quiet run's answer is a verdict until it is read)
        live = self._outbound.live(
            turn.conversation,
            key=str(turn.id),
            message=known_message(turn.live_message),
            reply_to=turn.reply_to,
            user=turn.user,
        )
        if live is not None and turn.live_message == PENDING:
            await live.recover()
            if live.message is not None:
                await self._store.record_live_message(turn.id, live.message)
        return live

    async def _think(
        self,
        turn: TurnRecord,
        setup: Setup,
        pacer: Pacer | None,
        stop: StopSignal,
        *,
        retry_errors: bool,
        before_step: Callable[[], Awaitable[None]] | None,
    ) -> _Answer:
        """Model calls and tool rounds until the model answers in words (or the limit),
        streamed into ``pacer`` when the reply is shown as it is written."""
        context = TurnContext(
            turn_id=turn.id,
            conversation_id=turn.conversation_id,
            conversation=turn.conversation,
            user=turn.user,
        )
        model = setup.model
        offered = self._tools.tools_for(context) if model is not None else {}
        offer = Offer(
            {name: tool for name, tool in offered.items() if setup.offers(name)},
            message=turn.trigger_text,
            limit=self._tools_offered,
        )
        tools = offer.tools()
        prepared = await self._prepare(turn, model)
        current = [prepared.message]
        past: Past | None = None
        seq = 1
        seen_files: set[int] = set()
        for _round in range(self._max_steps):
            taken = await self._busy.take_in(turn, seq, current, first=_round == 0)
            if taken != seq and self._files is not None and model is not None:
                # The messages taken in may have come with files.
                extra = await self._files.taken_in(
                    turn, sees_images=model.sees_images(), seen=seen_files
                )
                if extra is not None:
                    current.append(extra.message)
                    prepared = prepared.plus(extra)
            seq = taken
            step = turn.step(seq)
            answered: FinishedStep | None = None
            if step is not None and step.status != "started" and isinstance(step.output, dict):
                output = ModelCallOutput.from_json(step.output)
                tracing.mark(
                    "chatgate.model_call", tracing.replayed_model_call_attributes(seq, output)
                )
            else:
                if before_step is not None:
                    await before_step()
                stop.check(seq + 1)
                output, past = await self._model_step.call(
                    turn,
                    setup,
                    seq,
                    past,
                    current,
                    offer.specs(),
                    retry_errors=retry_errors,
                    on_text=pacer.heard if pacer is not None else None,
                    stop=stop,
                )
                status: StepStatus = "failed" if output.error is not None else "done"
                answered = FinishedStep(seq, "model_call", status, output.to_json())
            calls = output.tool_calls
            text = output.text
            if output.error or not calls:
                # A final answer: its model call is journaled with the reply's intent.
                if output.role == "assistant":
                    text = _with_files(text, prepared)
                return _Answer(seq + 1, output.role, text, output.error, answered=answered)
            if answered is not None:
                await self._store.finish_step(
                    turn.id, seq, kind="model_call", status=answered.status, output=answered.output
                )
                self._faults.hit("after_model_call")
            seq += 1
            stop.check(seq)  # before any tool of the round starts
            if pacer is not None:
                pacer.working(f"Running {', '.join(sorted({c.name for c in calls}))}…")
            current.append(ChatMessage(role="assistant", content=text, tool_calls=calls))
            results = await self._tool_round.run(
                turn, context, tools, calls, base=seq, permissions=setup.permissions
            )
            for call, result in zip(calls, results, strict=True):
                current.append(ChatMessage(role="tool", content=result, tool_call_id=call.id))
            seq += 2 * len(calls)
        text = STEP_LIMIT_REPLY.format(steps=self._max_steps)
        return _Answer(seq, "system", text, "step limit reached")


def _free_seq(turn: TurnRecord) -> int:
    """Where a stopped turn's reply goes: its journaled reply step (an attempt that stopped
    it died before delivering), else after every journaled step."""
    for step in turn.steps:
        if step.kind == "reply":
            return step.seq
    return max((step.seq for step in turn.steps), default=0) + 1


def _with_files(text: str, prepared: Prepared) -> str:
    """The reply with what the voice notes said before it, and the files not read after."""
    if prepared.heard:
        text = "\n".join(f"> {line}" for line in prepared.heard) + f"\n\n{text}"
    if prepared.not_read:
        text = f"{text}\n\n_Not read: {'; '.join(prepared.not_read)}._"
    return text


@dataclass(frozen=True, slots=True)
class _Answer:
    """How a turn ends: the reply's journal step, who speaks, what, any error, and the
    model call that answered when its outcome is not journaled yet."""

    seq: int
    role: Role
    text: str
    error: str | None
    answered: FinishedStep | None = None

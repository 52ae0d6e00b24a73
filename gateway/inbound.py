"""Inbound routing: every message goes to the ledger first, then to its lane (a turn, a
command, an approval decision); presses and approvals are decided here too."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol

import structlog

from adapters.web.send import WebHub
from agent_core import feedback
from agent_core.approvals import Approvals
from agent_core.commands import ParsedCommand, parse_command
from agent_core.delivery import Outbound
from agent_core.errors import (
    AlreadyDecided,
    ApprovalError,
    ApprovalNotFound,
    NotAllowedToDecide,
)
from agent_core.events import ButtonPress, InboundMessage, MessageDeleted, MessageEdited
from agent_core.faults import FaultPoints
from agent_core.gatekeeper import Gatekeeper
from agent_core.jobs import JobQueue
from agent_core.profiles import Profiles
from agent_core.records import (
    Accepted,
    ApprovalDecision,
    ApprovalRecord,
    BusyMode,
    ScheduleRecord,
)
from agent_core.revocation import Revocations
from agent_core.scheduling.service import ScheduleAction, Schedules
from agent_core.stores import Ledger
from agent_core.turn_marks import mark_received
from agent_core.turn_stop import interrupted_by
from gateway.commands import ChatCommands
from gateway.metrics import Metrics
from gateway.supervisor import Supervisor

log = structlog.get_logger("chatgate.inbound")


class StopTurn(Protocol):
    """Stops a turn this process runs (``TurnRunner.stop``); False when it runs elsewhere."""

    def __call__(self, turn_id: int, *, by: str) -> bool: ...


class Inbound:
    """Ledger, dedupe, then hand the conversation to the supervisor; decisions too."""

    def __init__(
        self,
        store: Ledger,
        supervisor: Supervisor,
        *,
        approvals: Approvals,
        gate: Gatekeeper,
        metrics: Metrics,
        hub: WebHub,
        schedules: Schedules,
        jobs: JobQueue,
        commands: ChatCommands,
        faults: FaultPoints | None = None,
        revocations: Revocations | None = None,
        stop_turn: StopTurn | None = None,
        busy_mode: BusyMode = "queue",
        marks: Outbound | None = None,
        profiles: Profiles | None = None,
    ) -> None:
        self._store = store
        self._supervisor = supervisor
        self._approvals = approvals
        self._gate = gate
        self._metrics = metrics
        self._hub = hub
        self._schedules = schedules
        self._jobs = jobs
        self._commands = commands
        self._faults = faults or FaultPoints()
        self._revocations = revocations
        # Stops a turn running in this process at once (``TurnRunner.stop``).
        self._stop_turn = stop_turn
        self._busy_mode: BusyMode = busy_mode
        # A conversation's busy mode where it set none comes from its profile.
        self._profiles = profiles
        # Marks a message that waits behind a running turn ``received`` (status marks on).
        self._marks = marks

    def _default_busy_mode(self, event: InboundMessage, accepted: Accepted) -> BusyMode:
        """The busy mode of a conversation that set none: its profile's, or the setting's."""
        if self._profiles is None:
            return self._busy_mode
        applied = self._profiles.applied(event.conversation, pinned_profile=accepted.pinned_profile)
        return applied.busy_mode

    @property
    def approvals(self) -> Approvals:
        """Who may decide what (a person's own page lists what they may decide)."""
        return self._approvals

    async def accept(
        self, event: InboundMessage, *, stored: Callable[[Accepted], None] | None = None
    ) -> Accepted:
        """Store the event durably (a duplicate is acknowledged and dropped) and act on it.

        When this returns, the message is safe: its turn runs now, or after a restart.
        ``stored`` is called as soon as it is in the ledger, before the rest (a command's
        answer) is done. ``/approve ID`` and ``/deny ID`` decide at once instead of opening
        a turn. Strangers and senders over their rate are kept (acknowledged) but open no
        turn, and so is a person's answer to "what went wrong?" after their 👎.
        """
        command = parse_command(event.text)
        admission = await self._gate.admit(event)
        open_turn = admission == "allow" and command is None
        accepted = await self._store.accept_inbound(event, open_turn=open_turn)
        if stored is not None:
            stored(accepted)
        outcome = "duplicate" if accepted.duplicate else _OUTCOMES[admission]
        self._metrics.inbound.labels(event.platform, outcome).inc()
        # An accepted message's own line is the turn's (``turn finished``), and metrics
        # count every outcome: one info line a message on the hot path, not two.
        (log.debug if outcome == "accepted" else log.info)(
            "inbound",
            platform=event.platform,
            event_id=event.platform_event_id,
            conversation_id=accepted.conversation_id,
            turn_id=accepted.turn_id,
            outcome=outcome,
        )
        if accepted.duplicate:
            return accepted
        self._faults.hit("after_accept")
        if admission != "allow":
            await self._gate.answer(event, accepted, admission)
        elif command is not None:
            await self._gate.spend(event)
            await self._command(command, event, accepted)
        elif accepted.question is not None:
            # The answer to a question they pressed "Other" on: its turn resumes.
            await self._gate.spend(event)
            await self._approvals.show_answer(accepted.question)
            self._metrics.approval_ended(accepted.question)
            await self._resume(accepted.question)
        elif accepted.answered is not None:
            # What went wrong, after a 👎: kept with the rating (in the ledger's
            # transaction), never a turn.
            await self._gate.spend(event)
            await self._gate.tell(event, accepted, feedback.acknowledgement(event.text))
        else:
            await self._gate.spend(event)
            mode = accepted.busy_mode or self._default_busy_mode(event, accepted)
            if mode == "interrupt":
                # The running turn ends at its next step; this one answers both messages.
                await self._stop_current(
                    accepted.conversation_id,
                    interrupted_by(event.user),
                    shown_as=f"a newer message from {event.user}",
                    before_turn=accepted.turn_id,
                )
            self._supervisor.submit(accepted.conversation_id)
            if mode == "queue" and accepted.behind:
                await self._waits(event, accepted)
        self._hub.publish(event.conversation)
        return accepted

    async def _waits(self, event: InboundMessage, accepted: Accepted) -> None:
        """The message waits behind the conversation's running turn: mark it ``received``."""
        if self._marks is not None and event.reply_to is not None:
            await mark_received(
                self._marks,
                event.conversation,
                event.reply_to,
                accepted.turn_id,
                saved=self._store.record_mark,
            )

    async def _command(
        self, command: ParsedCommand, event: InboundMessage, accepted: Accepted
    ) -> None:
        """``/approve ID`` and ``/deny ID`` decide here, ``/stop`` stops; every other
        command is answered by the chat commands, without the model."""
        if command.name == "stop":
            await self._stop(event, accepted)
            return
        if command.name not in ("approve", "deny"):
            await self._commands.answer(command, event, accepted)
            return
        decision: ApprovalDecision = "approve" if command.name == "approve" else "deny"
        try:
            await self.decide(
                command.args, decision=decision, user=event.user, team=event.user_team
            )
        except ApprovalError as exc:
            await self._gate.tell(event, accepted, refusal(exc))

    async def _stop(self, event: InboundMessage, accepted: Accepted) -> None:
        """``/stop``: the conversation's current turn ends at its next step boundary and
        says who stopped it (it runs here: told at once; elsewhere: the journal tells it
        within seconds); the approvals it waits for are cancelled, which wakes it to stop."""
        stopping = await self._stop_current(
            accepted.conversation_id, event.user, shown_as=event.user
        )
        if not stopping:
            await self._gate.tell(event, accepted, NOTHING_TO_STOP)

    async def message_deleted(self, event: MessageDeleted) -> None:
        """A person deleted their message: it leaves what the model sees, with the memories
        drawn from its turn; a turn it opened that has not started does not run."""
        found = await self._store.forget_message(event.conversation, event.message_id)
        if found:
            log.info("message deleted on its platform", platform=event.platform, found=found)
            self._hub.publish(event.conversation)

    async def message_edited(self, event: MessageEdited) -> None:
        """A person edited their message: a turn it opened that has not started reads the
        new text; during its turn the edit comes in as a message of its own, which the
        conversation's busy mode takes (``steer`` adds it to the running turn, ``queue``
        answers it after); an answered one keeps the new text and notes the first."""
        if not await self._gate.may_talk(event.user, event.conversation, event.user_team):
            log.info("edit by someone who may not talk here: ignored", platform=event.platform)
            return
        outcome = await self._store.edit_message(event.conversation, event.message_id, event.text)
        log.info("message edited on its platform", platform=event.platform, outcome=outcome)
        if outcome != "running":
            if outcome is not None:
                self._hub.publish(event.conversation)
            return
        edit = InboundMessage(
            platform=event.platform,
            workspace=event.workspace,
            channel=event.channel,
            thread=event.thread,
            user=event.user,
            user_team=event.user_team,
            text=f"(I edited my last message; it now says:) {event.text}",
            platform_event_id=f"edit:{event.platform_event_id}",
            reply_to=event.message_id,
        )
        await self.accept(edit)

    async def stop_pressed(self, press: ButtonPress) -> str | None:
        """A reply's Stop button: its turn (``press.value``) ends at its next step boundary,
        as for ``/stop``, if it still runs and the person may talk here; else why not (for
        them alone). Without a ``value`` (Slack's own Stop on the agent's session), the
        conversation's current turn, running or waiting for a decision."""
        if press.value is not None and not press.value.isdigit():
            return None
        if not await self._gate.may_talk(press.user, press.conversation, press.user_team):
            return "You may not talk to the agent here, so you cannot stop it."
        conversation_id = await self._store.conversation_id_for(press.conversation)
        if conversation_id is None and press.value is None and press.conversation.thread:
            # Slack's session Stop names the thread; a DM's top level is one conversation.
            whole = dataclasses.replace(press.conversation, thread=None)
            conversation_id = await self._store.conversation_id_for(whole)
        turn = None if press.value is None else int(press.value)
        if conversation_id is None or not await self._stop_current(
            conversation_id, press.user, shown_as=press.user, only_turn=turn
        ):
            return "That reply is finished: nothing to stop."
        return None

    async def _stop_current(
        self,
        conversation_id: str,
        by: str,
        *,
        shown_as: str,
        before_turn: int | None = None,
        only_turn: int | None = None,
    ) -> bool:
        """Ask the conversation's current turn (older than ``before_turn``; only if it is
        ``only_turn``) to stop for ``by``, tell it at once if it runs here, cancel the
        approvals it waits for (their prompts name ``shown_as``); False when there is no
        such turn."""
        asked = await self._store.request_stop(
            conversation_id, by, before_turn=before_turn, only_turn=only_turn
        )
        if asked is None:
            return False
        log.info("stop asked", turn_id=asked.turn_id, by=asked.by, status=asked.status)
        if self._stop_turn is not None:
            self._stop_turn(asked.turn_id, by=asked.by)
        for approval_id in asked.approvals:
            cancelled = await self._approvals.cancel(approval_id, stopped_by=shown_as)
            if cancelled is not None:
                self._metrics.approval_ended(cancelled)
                await self._resume(cancelled)
        if asked.status == "pending" and not asked.approvals:
            self._supervisor.submit(conversation_id)
        return True

    async def change_schedule(
        self, schedule_id: str, action: ScheduleAction, *, user: str, conversation_id: str
    ) -> ScheduleRecord:
        """A button or ``cancel``: pause, resume or delete, noted in the conversation.

        Raises ``ScheduleActionError`` (not found here, or not allowed)."""
        changed = await self._schedules.change(
            schedule_id, action, user=user, conversation_id=conversation_id
        )
        verb = {"pause": "paused", "resume": "resumed", "delete": "deleted"}[action]
        await self._store.add_note(conversation_id, f"{user} {verb} schedule {schedule_id}.")
        conversation = await self._store.conversation(conversation_id)
        if conversation is not None:
            self._hub.publish(conversation.key)
        return changed

    async def answer(
        self, approval_id: str, *, choice: str, user: str, team: str | None = None
    ) -> ApprovalRecord:
        """A question's button pressed: answered (its turn resumes), or "Other" (the
        presser's next message answers it). Raises ApprovalError."""
        answered = await self._approvals.answer(approval_id, choice=choice, user=user, team=team)
        if answered.status != "pending":
            self._metrics.approval_ended(answered)
            await self._resume(answered)
        else:
            self._hub.publish(answered.conversation)
        return answered

    async def decide(
        self,
        approval_id: str,
        *,
        decision: ApprovalDecision,
        user: str,
        team: str | None = None,
    ) -> ApprovalRecord:
        """Decide an approval (first answer wins) and wake the turn that waits on it."""
        decided = await self._approvals.decide(approval_id, decision=decision, user=user, team=team)
        self._metrics.approval_ended(decided)
        await self._resume(decided)
        return decided

    async def submit(self, job_ids: Sequence[int]) -> None:
        """Hand stored jobs to the queue (see :func:`submit_or_later`)."""
        await submit_or_later(self._jobs, job_ids)

    async def _resume(self, decided: ApprovalRecord) -> None:
        """Wake the decided turn where it runs: its job (queued turns) or its lane."""
        if decided.requeued_jobs:
            await self.submit(decided.requeued_jobs)
        else:
            self._supervisor.submit(decided.conversation_id)
        self._hub.publish(decided.conversation)

    async def expire_approvals(self) -> None:
        """Expire approvals nobody decided in time and wake their turns."""
        for approval in await self._approvals.expire_due():
            self._metrics.approval_ended(approval)
            await self._resume(approval)

    async def enforce_access(self) -> None:
        """Cancel the approvals and pause the schedules of people who lost access, and
        wake the turns those approvals held."""
        if self._revocations is None:
            return
        for approval in await self._revocations.sweep():
            self._metrics.approval_ended(approval)
            await self._resume(approval)

    def reject(self, platform: str) -> None:
        """Count an inbound request that was refused before reaching the ledger."""
        self._metrics.inbound.labels(platform, "rejected").inc()


NOTHING_TO_STOP = "Nothing is running here to stop."
_OUTCOMES = {"allow": "accepted", "pair": "pairing", "refuse": "refused", "limited": "limited"}


async def submit_or_later(queue: JobQueue, job_ids: Sequence[int]) -> None:
    """Hand stored jobs to the queue; if the broker is down, the schedule dispatcher sends them
    when it is back (the rows are the truth), so the person is not kept waiting."""
    try:
        await queue.submit(job_ids)
    except Exception:
        log.warning("job queue unavailable; the dispatcher will send later", jobs=job_ids)


def refusal(error: ApprovalError) -> str:
    """Why a decision was not taken, for the person who tried (any platform)."""
    approval_id = error.args[0] if error.args else "?"
    if isinstance(error, ApprovalNotFound):
        return f"There is no approval {approval_id}."
    if isinstance(error, AlreadyDecided):
        return f"{approval_id} was already decided."
    if isinstance(error, NotAllowedToDecide) and error.reason == "own_request":
        return f"You asked for {approval_id}: policy needs someone else to approve it."
    if isinstance(error, NotAllowedToDecide) and error.reason == "not_asked":
        return f"{approval_id} asks someone else: only they can answer it."
    if isinstance(error, NotAllowedToDecide) and error.reason == "no_access":
        return f"You may no longer talk to the agent, so you cannot decide {approval_id}."
    return f"You may not decide {approval_id}: ask the person who asked, or an admin."

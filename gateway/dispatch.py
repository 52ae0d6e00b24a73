"""The dispatcher: every inbound event goes to the ledger first, then to its lane."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

import structlog
from pydantic import JsonValue

from adapters.web import WebHub
from agent_core.approvals import Approvals
from agent_core.budgets import BudgetLimits
from agent_core.commands import ParsedCommand, parse_command
from agent_core.errors import (
    AlreadyDecided,
    ApprovalError,
    ApprovalNotFound,
    NotAllowedToDecide,
    ScheduleActionError,
)
from agent_core.events import InboundMessage
from agent_core.faults import FaultPoints
from agent_core.gatekeeper import Gatekeeper
from agent_core.jobs import JobQueue
from agent_core.records import (
    Accepted,
    ApprovalDecision,
    ApprovalRecord,
    RunRecord,
    ScheduleRecord,
)
from agent_core.revocation import Revocations
from agent_core.scheduling import ScheduleAction, Schedules
from agent_core.storage.store import Store
from gateway.metrics import Metrics
from gateway.supervisor import Supervisor

log = structlog.get_logger("chatgate.dispatch")


class Dispatcher:
    """Ledger, dedupe, then hand the conversation to the supervisor; decisions too."""

    def __init__(
        self,
        store: Store,
        supervisor: Supervisor,
        *,
        approvals: Approvals,
        gate: Gatekeeper,
        metrics: Metrics,
        hub: WebHub,
        schedules: Schedules,
        jobs: JobQueue,
        faults: FaultPoints | None = None,
        budgets: BudgetLimits | None = None,
        revocations: Revocations | None = None,
    ) -> None:
        self._store = store
        self._supervisor = supervisor
        self._approvals = approvals
        self._gate = gate
        self._metrics = metrics
        self._hub = hub
        self._schedules = schedules
        self._jobs = jobs
        self._faults = faults or FaultPoints()
        self._budgets = budgets or BudgetLimits()
        self._revocations = revocations

    async def accept(
        self, event: InboundMessage, *, stored: Callable[[Accepted], None] | None = None
    ) -> Accepted:
        """Store the event durably (a duplicate is acknowledged and dropped) and act on it.

        When this returns, the message is safe: its turn runs now, or after a restart.
        ``stored`` is called as soon as it is in the ledger, before the rest (a command's
        answer) is done. ``/approve ID`` and ``/deny ID`` decide at once instead of opening
        a turn. Strangers and senders over their rate are kept (acknowledged) but open no
        turn.
        """
        command = parse_command(event.text)
        admission = await self._gate.admit(event)
        open_turn = admission == "allow" and command is None
        accepted = await self._store.accept_inbound(event, open_turn=open_turn)
        if stored is not None:
            stored(accepted)
        outcome = "duplicate" if accepted.duplicate else _OUTCOMES[admission]
        self._metrics.inbound.labels(event.platform, outcome).inc()
        log.info(
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
        else:
            await self._gate.spend(event)
            self._supervisor.submit(accepted.conversation_id)
        self._hub.publish(event.conversation)
        return accepted

    async def _command(
        self, command: ParsedCommand, event: InboundMessage, accepted: Accepted
    ) -> None:
        """Text commands answered here, without the model."""
        match command.name:
            case "approve" | "deny":
                decision: ApprovalDecision = "approve" if command.name == "approve" else "deny"
                try:
                    await self.decide(
                        command.args, decision=decision, user=event.user, team=event.user_team
                    )
                except ApprovalError as exc:
                    await self._gate.tell(event, accepted, refusal(exc))
            case "help":
                await self._gate.tell(event, accepted, HELP)
            case "new":
                await self._store.start_fresh(accepted.conversation_id, FRESH)
            case "usage":
                await self._gate.tell(event, accepted, await self._usage(event, accepted))
            case "jobs":
                text, payload = await self.jobs_listing(accepted.conversation_id)
                await self._gate.tell(event, accepted, text, payload=payload)
            case "cancel":
                await self._gate.tell(
                    event, accepted, await self._cancel(command.args, event, accepted)
                )
            case "bg":
                await self._gate.tell(
                    event, accepted, await self._background(command, event, accepted)
                )
            case "schedule":
                await self._gate.tell(event, accepted, SCHEDULE_HOW)

    async def _usage(self, event: InboundMessage, accepted: Accepted) -> str:
        """``usage``: this conversation's turns, calls, tokens and cost; the sender's spend
        today; each set budget beside its figure."""
        used = await self._store.usage(accepted.conversation_id)
        spent = await self._store.spending(accepted.conversation_id, event.user)
        limits = self._budgets
        lines = [
            f"This conversation so far: {used.turns} turns, {used.model_calls} model calls, "
            f"{used.prompt_tokens} prompt and {used.completion_tokens} completion tokens, "
            f"${spent.conversation_usd:.4f}.",
            f"You today (UTC): {spent.user_day_tokens} tokens, ${spent.user_day_usd:.4f}.",
        ]
        budgets = [
            (limits.turn_tokens, "per turn", "tokens"),
            (limits.conversation_tokens, "per conversation", "tokens"),
            (limits.conversation_usd, "per conversation", "USD"),
            (limits.user_daily_tokens, "per person per day", "tokens"),
            (limits.user_daily_usd, "per person per day", "USD"),
            (limits.daily_usd, "for everyone per day", "USD"),
        ]
        shown = [
            f"{limit:,.2f} USD {scope}" if unit == "USD" else f"{int(limit):,} tokens {scope}"
            for limit, scope, unit in budgets
            if limit is not None
        ]
        if shown:
            lines.append("Budgets: " + "; ".join(shown) + ".")
        return "\n".join(lines)

    async def jobs_listing(self, conversation_id: str) -> tuple[str, dict[str, JsonValue]]:
        """``jobs``: the conversation's schedules and their latest runs, as text and as the
        structured payload platforms render with buttons (pause, resume, delete)."""
        found = await self._schedules.listing(conversation_id)
        if not found:
            return NO_JOBS, {"jobs": []}
        lines = ["Schedules in this conversation:"]
        for schedule in found:
            lines.append(self._schedules.describe(schedule))
            for run in schedule.runs:
                lines.append(f"    {run_line(run)}")
        lines.append("/cancel ID deletes one.")
        return "\n".join(lines), {"jobs": [self.schedule_item(s) for s in found]}

    def schedule_item(self, schedule: ScheduleRecord) -> dict[str, JsonValue]:
        """A schedule as the jobs payload (and the web API) shows it."""
        return {
            "id": schedule.id,
            "when": self._schedules.recurrence(schedule).describe(),
            "prompt": schedule.prompt,
            "status": schedule.status,
            "created_by": schedule.created_by,
            "next_run_at": _iso(schedule.next_run_at),
            "runs": [
                {
                    "job_id": run.job_id,
                    "status": run.status,
                    "scheduled_for": _iso(run.scheduled_for),
                    "finished_at": _iso(run.finished_at),
                    "receipt": run.receipt,
                    "error": run.error,
                }
                for run in schedule.runs
            ],
        }

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

    async def refresh_listing(self, message_id: int) -> None:
        """Redraw a ``jobs`` listing after one of its buttons changed a schedule."""
        message = await self._store.message(message_id)
        if message is None or not isinstance(message.payload, dict):
            return
        if "jobs" not in message.payload:
            return
        text, payload = await self.jobs_listing(message.conversation_id)
        await self._store.rewrite_note(message_id, text, payload)

    async def _cancel(self, args: str, event: InboundMessage, accepted: Accepted) -> str:
        schedule_id = args.strip()
        if not schedule_id:
            return "Usage: /cancel ID (the ids are in /jobs)."
        try:
            await self._schedules.change(
                schedule_id, "delete", user=event.user, conversation_id=accepted.conversation_id
            )
        except ScheduleActionError as exc:
            return f"Could not cancel: {exc}."
        return f"Deleted schedule {schedule_id}; it will not run again."

    async def _background(
        self, command: ParsedCommand, event: InboundMessage, accepted: Accepted
    ) -> str:
        prompt = command.args.strip()
        if not prompt:
            return "Usage: /bg PROMPT: I work on it in the background and post the answer here."
        job_id = await self._store.background_turn(
            accepted.conversation_id, user=event.user, prompt=prompt, reply_to=event.reply_to
        )
        await self._submit([job_id])
        return f"Working on it in the background (job {job_id}); the answer will be posted here."

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

    async def _submit(self, job_ids: Sequence[int]) -> None:
        """Hand stored jobs to the queue; if the broker is down, the dispatcher sends them
        when it is back (the rows are the truth), so the person is not kept waiting."""
        try:
            await self._jobs.submit(job_ids)
        except Exception:
            log.warning("job queue unavailable; the dispatcher will send later", jobs=job_ids)

    async def _resume(self, decided: ApprovalRecord) -> None:
        """Wake the decided turn where it runs: its job (queued turns) or its lane."""
        if decided.requeued_jobs:
            await self._submit(decided.requeued_jobs)
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


HELP = """Commands:
/help: this list
/new: start afresh (earlier messages stay here but are no longer sent to the model)
/jobs: this conversation's schedules, their latest runs, and buttons to pause, resume, delete
/cancel ID: delete a schedule
/bg PROMPT: work on PROMPT in the background and post the answer here
/usage: turns, model calls and tokens in this conversation
/approve ID, /deny ID: decide a pending approval (or press its buttons)
Ask in words to schedule something ("every weekday at 9, summarise ...")."""
SCHEDULE_HOW = (
    'Ask me in words, e.g. "every weekday at 9:00, summarise the open incidents" or "in 2 '
    'hours remind me to call Sam"; /jobs lists what is scheduled here.'
)
NO_JOBS = (
    "No schedules in this conversation. Ask me to do something on a schedule, e.g. "
    '"every weekday at 9:00, summarise the open incidents".'
)
FRESH = "Started afresh: earlier messages stay here but are no longer sent to the model."

_OUTCOMES = {"allow": "accepted", "pair": "pairing", "refuse": "refused", "limited": "limited"}


def refusal(error: ApprovalError) -> str:
    """Why a decision was not taken, for the person who tried (any platform)."""
    approval_id = error.args[0] if error.args else "?"
    if isinstance(error, ApprovalNotFound):
        return f"There is no approval {approval_id}."
    if isinstance(error, AlreadyDecided):
        return f"{approval_id} was already decided."
    if isinstance(error, NotAllowedToDecide) and error.reason == "own_request":
        return f"You asked for {approval_id}: policy needs someone else to approve it."
    if isinstance(error, NotAllowedToDecide) and error.reason == "no_access":
        return f"You may no longer talk to the agent, so you cannot decide {approval_id}."
    return f"You may not decide {approval_id}: ask the person who asked, or an admin."


def run_line(run: RunRecord) -> str:
    """One run of a schedule for the ``jobs`` text."""
    at = run.scheduled_for or run.created_at
    line = f"{at:%Y-%m-%d %H:%M} UTC {run.status}"
    if run.receipt:
        line += f", delivered ({run.receipt})"
    if run.error:
        line += f": {run.error}"
    return line


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()

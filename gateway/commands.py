"""The text commands answered without the model (``/help``, ``/new``, ``/usage``,
``/jobs``, ``/cancel``, ``/bg``, ``/schedule``), and the ``jobs`` listing they and the
listing's buttons draw. Inbound routing hands a command here once it is in the ledger."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Literal, Protocol

from pydantic import JsonValue

from agent_core import forget_me
from agent_core.budgets import BudgetLimits
from agent_core.command_registry import BY_NAME, help_text
from agent_core.commands import ParsedCommand
from agent_core.errors import ScheduleActionError
from agent_core.events import InboundMessage, utcnow
from agent_core.gatekeeper import Gatekeeper
from agent_core.journaled import JobsListing, RunItem, ScheduleItem, lag_note
from agent_core.profiles import Profiles
from agent_core.records import Accepted, BusyMode, RunRecord, ScheduleRecord
from agent_core.scheduling.service import Schedules
from agent_core.stores import FeedbackStore, JobStore, Ledger, UsageStore
from agent_core.triggers import Triggers
from gateway import trigger_commands


class CommandStore(Ledger, JobStore, UsageStore, FeedbackStore, Protocol):
    """What this module asks of the storage."""

    async def conversation_scope(self, conversation_id: str) -> list[str]:
        """This conversation, and its channel's threads when it is a channel's own."""
        ...


class ChatCommands:
    """Answers each command in the conversation it was typed in."""

    def __init__(
        self,
        store: CommandStore,
        *,
        gate: Gatekeeper,
        schedules: Schedules,
        submit: Callable[[Sequence[int]], Awaitable[None]],
        budgets: BudgetLimits | None = None,
        busy_mode: BusyMode = "queue",
        profiles: Profiles | None = None,
        triggers: Triggers | None = None,
    ) -> None:
        self._store = store
        self._triggers = triggers
        self._profiles_of = profiles
        self._busy_mode: BusyMode = busy_mode
        self._gate = gate
        self._schedules = schedules
        # Hands stored jobs to the queue (``/bg``).
        self._submit = submit
        self._budgets = budgets or BudgetLimits()

    async def answer(
        self, command: ParsedCommand, event: InboundMessage, accepted: Accepted
    ) -> None:
        """Do what ``command`` asks and answer in the conversation it came from."""
        private = BY_NAME[command.name].answer == "private"

        async def tell(text: str, payload: dict[str, JsonValue] | None = None) -> None:
            await self._gate.tell(event, accepted, text, payload=payload, private=private)

        match command.name:
            case "help":
                await tell(help_text())
            case "new":
                await self._store.start_fresh(accepted.conversation_id, FRESH)
                await self._gate.tell(event, accepted, FRESH, noted=True)
            case "usage":
                await tell(await self._usage(event, accepted))
            case "jobs":
                await tell(*await self.jobs_listing(accepted.conversation_id))
            case "cancel":
                await tell(await self._cancel(command.args, event, accepted))
            case "bg":
                await tell(await self._background(command, event, accepted))
            case "schedule":
                await tell(SCHEDULE_HOW)
            case "busy":
                await tell(await self._busy(command.args, event, accepted))
            case "forget":
                await tell(*forget_me.question(event.user, now=utcnow()))
            case "model" | "profile":
                await tell(await self._profiles(command, event, accepted))
            case "triggers":
                if self._triggers is None:
                    await tell("Triggers are not available here.")
                    return
                scope = await self._store.conversation_scope(accepted.conversation_id)
                await tell(
                    await trigger_commands.answer(
                        self._triggers, command.args, user=event.user, scope=scope
                    )
                )

    async def _profiles(
        self, command: ParsedCommand, event: InboundMessage, accepted: Accepted
    ) -> str:
        """``/profile`` and ``/model``: what applies here and why; with a name, an admin
        chooses (``default`` goes back to what the place gives)."""
        profiles = self._profiles_of
        if profiles is None:
            return "No profiles are configured."  # a gateway built without them (tests)
        kind: Literal["profile", "model"] = "model" if command.name == "model" else "profile"
        wanted = command.args.strip()
        if wanted:
            if not self._gate.is_admin(event.user):
                return f"Only an admin can choose the {kind} here."
            known = profiles.names if kind == "profile" else profiles.models()
            if wanted != "default" and wanted not in known:
                listed = ", ".join(known) or "none"
                return f"Unknown {kind} {wanted!r}. Configured: {listed}."
            value = None if wanted == "default" else wanted
            await self._store.pin(accepted.conversation_id, kind=kind, value=value)
        pinned_profile, pinned_model = await self._store.pins(accepted.conversation_id)
        applied = profiles.applied(
            event.conversation, pinned_profile=pinned_profile, pinned_model=pinned_model
        )
        if kind == "model":
            why = "chosen by an admin" if pinned_model else f"from profile {applied.shown_name}"
            fallbacks = f"; fallbacks {', '.join(applied.fallbacks)}" if applied.fallbacks else ""
            listed = ", ".join(profiles.models()) or "none"
            return (
                f"Model here: {applied.model or 'none configured'} ({why}{fallbacks}). "
                f"Configured: {listed}. An admin can choose one: /model NAME, or /model default."
            )
        if pinned_profile and applied.name == pinned_profile:
            why = "chosen by an admin"
        elif applied.name is None:
            why = "no profile applies here: the settings' own"
        else:
            why = "from where this conversation is"
        tools = "all" if applied.tools is None else ", ".join(applied.tools) or "none"
        prompt = " ".join(applied.system_prompt.split())
        shown = prompt if len(prompt) <= 120 else prompt[:119] + "…"
        listed = ", ".join(profiles.names) or "none"
        return (
            f"Profile here: {applied.shown_name} ({why}). Model {applied.model or 'none'}; "
            f"tools: {tools}; busy mode {applied.busy_mode}; answers "
            f"{'every message' if applied.reply == 'all' else 'when mentioned'}; system "
            f'prompt: "{shown}". Profiles: {listed}. An admin can choose one: /profile NAME, '
            "or /profile default."
        )

    async def _busy(self, args: str, event: InboundMessage, accepted: Accepted) -> str:
        """``/busy``: what a message sent while a turn runs does here; ``/busy MODE`` sets
        it for this conversation (``/busy default`` goes back to the setting's)."""
        wanted = args.strip().lower()
        if wanted == "default":
            await self._store.set_busy_mode(accepted.conversation_id, None)
        elif wanted in BUSY_MODES:
            await self._store.set_busy_mode(accepted.conversation_id, wanted)
        elif wanted:
            return f"Unknown mode {wanted!r}. {BUSY_HOW}"
        own = await self._store.busy_mode(accepted.conversation_id)
        mode = own or self._busy_mode
        if own is None and self._profiles_of is not None:
            pinned, _model = await self._store.pins(accepted.conversation_id)
            mode = self._profiles_of.applied(event.conversation, pinned_profile=pinned).busy_mode
        where = "set for this conversation" if own else "the default"
        return f"Busy mode: {mode} ({where}): {BUSY_MODES[mode]}\n{BUSY_HOW}"

    async def _usage(self, event: InboundMessage, accepted: Accepted) -> str:
        """``usage``: this conversation's turns, calls, tokens, cost and the ratings its
        replies got; the sender's spend today; each set budget beside its figure."""
        used = await self._store.usage(accepted.conversation_id)
        spent = await self._store.spending(accepted.conversation_id, event.user)
        rated = await self._store.feedback_counts(accepted.conversation_id)
        limits = self._budgets
        lines = [
            f"This conversation so far: {used.turns} turns, {used.model_calls} model calls, "
            f"{used.prompt_tokens} prompt and {used.completion_tokens} completion tokens, "
            f"${spent.conversation_usd:.4f}; replies rated 👍 {rated['up']}, "
            f"👎 {rated['down']}.",
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
            return NO_JOBS, JobsListing().to_payload()
        lines = ["Schedules in this conversation:"]
        for schedule in found:
            lines.append(self._schedules.describe(schedule))
            for run in schedule.runs:
                lines.append(f"    {run_line(run)}")
        lines.append("/cancel ID deletes one.")
        listing = JobsListing(jobs=tuple(self.schedule_item(s) for s in found))
        return "\n".join(lines), listing.to_payload()

    def schedule_item(self, schedule: ScheduleRecord) -> ScheduleItem:
        """A schedule as the jobs payload (and the web API) shows it."""
        return ScheduleItem(
            id=schedule.id,
            when=self._schedules.recurrence(schedule).describe(),
            prompt=schedule.prompt,
            status=schedule.status,
            created_by=schedule.created_by,
            next_run_at=_iso(schedule.next_run_at),
            runs=tuple(
                RunItem(
                    job_id=run.job_id,
                    status=run.status,
                    scheduled_for=_iso(run.scheduled_for),
                    finished_at=_iso(run.finished_at),
                    receipt=run.receipt,
                    error=run.error,
                    lag_seconds=None if run.lag is None else round(run.lag, 3),
                    late=run.late,
                    nothing_to_report=run.nothing_to_report,
                )
                for run in schedule.runs
            ),
        )

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


SCHEDULE_HOW = (
    'Ask me in words, e.g. "every weekday at 9:00, summarise the open incidents" or "in 2 '
    'hours remind me to call Sam"; /jobs lists what is scheduled here.'
)
NO_JOBS = (
    "No schedules in this conversation. Ask me to do something on a schedule, e.g. "
    '"every weekday at 9:00, summarise the open incidents".'
)
BUSY_MODES: dict[BusyMode, str] = {
    "queue": "a message sent while the agent works waits for its own answer",
    "steer": "a message sent while the agent works joins what it is doing, before its next "
    "model call",
    "interrupt": "a message sent while the agent works stops what it is doing, and both "
    "messages are answered together",
    "collect": "messages sent close together are answered together, once the conversation "
    "is quiet for a moment",
}
BUSY_HOW = "/busy queue, /busy steer, /busy interrupt, /busy collect, or /busy default."
FRESH = "Started afresh: earlier messages stay here but are no longer sent to the model."


def run_line(run: RunRecord) -> str:
    """One run of a schedule for the ``jobs`` text."""
    at = run.scheduled_for or run.created_at
    line = f"{at:%Y-%m-%d %H:%M} UTC {run.status}"
    if (lag := lag_note(run.lag, late=run.late)) != "":
        line += f", {lag}"
    if run.receipt:
        line += f", delivered ({run.receipt})"
    elif run.nothing_to_report:
        line += ", nothing to report"
    if run.error:
        line += f": {run.error}"
    return line


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()

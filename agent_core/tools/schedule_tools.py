"""``schedule_task``, ``list_schedules`` and ``cancel_schedule``: schedules from chat.

A schedule's runs post their results to the conversation that created it and run with
its creator's permissions (the turn's user). ``schedule_task`` is idempotent by the call's
idempotency key: re-run after a crash, it finds the schedule it already made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import Field

from agent_core.errors import ScheduleActionError
from agent_core.records import CATCH_UP
from agent_core.scheduling.recurrence import ScheduleError
from agent_core.scheduling.service import Schedules
from agent_core.tools.base import Tool, ToolContext, ToolFailed, TurnContext


def schedule_tools_factory(schedules: Schedules) -> Callable[[TurnContext], list[Tool]]:
    """The factory of the three schedule tools (built once)."""

    async def schedule_task(
        context: ToolContext,
        prompt: Annotated[str, Field(min_length=1, max_length=4000)],
        schedule: Annotated[str, Field(min_length=1, max_length=200)],
        timezone: str | None = None,
        missed: Literal["skip", "run_once", "catch_up"] = "run_once",
        also_in: Annotated[list[str], Field(max_length=20)] | None = None,
        jitter: Annotated[str, Field(max_length=20)] | None = None,
        kind: Literal["agent", "message"] = "agent",
        catch_up: Literal["skip", "latest", "all"] | None = None,
        notify: Literal["always", "if_notable"] = "always",
    ) -> str:
        """Run a prompt later or repeatedly; each run's answer is posted to this conversation.

        `schedule` is a 5-field cron expression ("0 9 * * 1-5": weekdays at 9:00),
        `every N{s,m,h,d}` ("every 2h"), `in N{s,m,h,d}` ("in 20m": once), or an ISO-8601
        time for one run ("2026-12-01T09:00"). Times and cron fields are read in `timezone`
        (an IANA name such as "Europe/Berlin"; default: the server's). `catch_up` says what
        happens to runs missed while chatgate was down: "skip" them, run the "latest" one
        (default), or run "all" of them (up to a limit); `missed` is its older spelling.
        `also_in` (admins only) posts each run's answer to other chats too, named
        platform:channel (e.g. "slack:C0123", "web:ops"). `jitter` ("5m", at most "1h"),
        when the person says the exact minute does not matter, starts each run at some
        moment within that window after its time, so many runs due at once spread out.
        `kind` "message" posts `prompt` itself at each run, word for word, with no thinking
        ("remind me every Monday at 9 to send the report": prompt "Reminder: send the
        report"); use it whenever the run needs no thought, and "agent" (the default) when
        each run must look something up or write something new. `notify` "if_notable"
        (for checks: "tell me if the build breaks") posts a run's answer only when that
        run finds something worth saying; "always" (the default) posts every answer.
        """
        try:
            created, new = await schedules.create(
                conversation_id=context.turn.conversation_id,
                user=context.turn.user,
                prompt=prompt,
                spec=schedule,
                timezone=timezone,
                missed=CATCH_UP[catch_up] if catch_up is not None else missed,
                also_in=also_in or (),
                creation_key=context.idempotency_key,
                jitter=jitter,
                action=kind,
                notify=notify,
            )
        except ScheduleError as exc:
            raise ToolFailed(str(exc)) from None
        first = created.next_run_at
        when = f"{first:%Y-%m-%d %H:%M:%S} UTC" if first is not None else "never"
        verb = "Scheduled" if new else "Already scheduled"
        if created.action == "message":
            verb += " the reminder"
        return (
            f"{verb} {created.id}: {schedules.recurrence(created).describe()}; first run "
            f"{when}. Cancel with cancel_schedule({created.id!r}) or /cancel {created.id}."
        )

    async def list_schedules(context: ToolContext) -> str:
        """List this conversation's schedules: id, when, status, next run and prompt."""
        found = await schedules.listing(context.turn.conversation_id, runs=0)
        if not found:
            return "This conversation has no schedules."
        return "\n".join(schedules.describe(s) for s in found)

    async def cancel_schedule(
        context: ToolContext, id: Annotated[str, Field(pattern=r"^sc_[0-9a-f]{8}$")]
    ) -> str:
        """Delete one of this conversation's schedules by id (as list_schedules shows it)."""
        try:
            changed = await schedules.change(
                id,
                "delete",
                user=context.turn.user,
                conversation_id=context.turn.conversation_id,
            )
        except ScheduleActionError as exc:
            raise ToolFailed(str(exc)) from None
        return f"Deleted schedule {changed.id}; it will not run again."

    tools = [
        Tool(schedule_task, idempotent=True),
        Tool(list_schedules, idempotent=True),
        Tool(cancel_schedule, idempotent=True),
    ]

    def factory(turn: TurnContext) -> list[Tool]:
        return tools

    return factory

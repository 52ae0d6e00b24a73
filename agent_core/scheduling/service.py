"""Schedules as people use them: created from chat, listed, paused, resumed, deleted, and
planned by the dispatcher. The time arithmetic lives in ``recurrence`` and ``fire_times``
beside this module; the rows in ``agent_core.storage.schedules``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, TypeAlias

from agent_core.errors import NotAllowedToChange, ScheduleNotFound
from agent_core.events import utcnow
from agent_core.records import (
    DueSchedule,
    MissedPolicy,
    NewSchedule,
    Notify,
    RunAction,
    ScheduleRecord,
)
from agent_core.scheduling.jitter import parse_jitter
from agent_core.scheduling.recurrence import (
    Recurrence,
    ScheduleError,
    due_slots,
    min_gap,
    parse_recurrence,
)
from agent_core.stores import ScheduleStore

ScheduleAction: TypeAlias = Literal["pause", "resume", "delete"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleLimits:
    """What ``[schedule_*]`` settings allow."""

    timezone: str = "UTC"
    min_interval: timedelta = timedelta(seconds=60)
    grace: timedelta = timedelta(seconds=120)
    catch_up_max: int = 10
    per_conversation: int = 50


class Schedules:
    """Create, list and change schedules; plan what a due one fires."""

    def __init__(
        self, store: ScheduleStore, *, limits: ScheduleLimits, admins: Collection[str] = ()
    ) -> None:
        self._store = store
        self.limits = limits
        self._admins = frozenset(admins)

    async def create(
        self,
        *,
        conversation_id: str,
        user: str,
        prompt: str,
        spec: str,
        timezone: str | None = None,
        missed: MissedPolicy = "run_once",
        also_in: Sequence[str] = (),
        creation_key: str | None = None,
        jitter: str | None = None,
        action: RunAction = "agent",
        notify: Notify = "always",
        now: datetime | None = None,
    ) -> tuple[ScheduleRecord, bool]:
        """Store a schedule whose results go to ``conversation_id`` (and, for admins, to
        the conversations named in ``also_in`` as ``platform:channel``: each delivery is a
        job of its own).

        Raises ``ScheduleError`` (with a message for the user) for a bad spec or time zone,
        a recurrence more frequent than the minimum interval, an empty prompt, an unknown
        or forbidden extra conversation, a ``jitter`` window (``"5m"``: each run starts at a
        moment within 5 minutes after its slot) that is malformed or not shorter than the
        time between runs, or too many schedules in the conversation. ``action``
        "message" posts the prompt as it is at each slot, with no model call (a reminder);
        ``notify`` "if_notable" posts a run's answer only when its model marks it worth
        posting (not for reminders, which are the post). Returns (the schedule, False)
        when ``creation_key`` made it before."""
        now = now or utcnow()
        if action == "message" and notify != "always":
            raise ScheduleError(
                "a reminder is its own post: notify if_notable needs kind agent (a run that thinks)"
            )
        if not prompt.strip():
            raise ScheduleError("the prompt is empty: say what to do at each run")
        targets = [conversation_id]
        if also_in and user not in self._admins:
            raise ScheduleError("only an admin may post a schedule's results to other chats")
        for name in also_in:
            platform, _sep, channel = name.partition(":")
            found = await self._store.find_conversation(platform, channel)
            if found is None:
                raise ScheduleError(
                    f"no conversation {name!r} (use platform:channel of a chat I am in, "
                    "e.g. slack:C0123 or web:ops)"
                )
            if found not in targets:
                targets.append(found)
        recurrence, first = self.timetable(spec, timezone, now=now)
        jitter_seconds = parse_jitter(jitter)
        gap = min_gap(recurrence, start=now)
        if jitter_seconds and gap is not None and timedelta(seconds=jitter_seconds) >= gap:
            raise ScheduleError(
                f"a jitter of {jitter} is not shorter than the {_seconds(gap)} between runs"
            )
        return await self._store.create_schedule(
            NewSchedule(
                conversation_id=conversation_id,
                created_by=user,
                prompt=prompt.strip(),
                kind=recurrence.kind,
                spec=recurrence.spec,
                timezone=recurrence.timezone,
                anchor=recurrence.anchor,
                missed=missed,
                next_run_at=first,
                targets=tuple(targets),
                creation_key=creation_key,
                limit=self.limits.per_conversation,
                jitter_seconds=jitter_seconds,
                action=action,
                notify=notify,
            )
        )

    def timetable(
        self, spec: str, timezone: str | None, *, now: datetime
    ) -> tuple[Recurrence, datetime]:
        """A schedule as typed, checked: its recurrence and first fire time. Raises
        ``ScheduleError`` for a bad spec or zone, one more frequent than the minimum
        interval, one too far away, one that never fires."""
        recurrence = parse_recurrence(spec, timezone or self.limits.timezone, now=now)
        try:
            gap = min_gap(recurrence, start=now)
            first = recurrence.next_after(now - timedelta(microseconds=1))
        except OverflowError:
            raise ScheduleError(f"{recurrence.describe()} is too far away") from None
        if gap is not None and gap < self.limits.min_interval:
            raise ScheduleError(
                f"{recurrence.describe()} runs every {_seconds(gap)}; the minimum here is "
                f"{_seconds(self.limits.min_interval)} (setting schedule_min_seconds)"
            )
        if first is None:
            raise ScheduleError(f"{recurrence.describe()} never fires")
        return recurrence, first

    async def listing(self, conversation_id: str, *, runs: int = 3) -> list[ScheduleRecord]:
        """This conversation's schedules with their latest runs here."""
        return await self._store.schedules_for(conversation_id, runs=runs)

    async def change(
        self,
        schedule_id: str,
        action: ScheduleAction,
        *,
        user: str,
        conversation_id: str | None = None,
        now: datetime | None = None,
    ) -> ScheduleRecord:
        """Pause, resume or delete; only the creator or an admin may.

        With ``conversation_id`` the schedule must belong to that conversation. Raises
        ``ScheduleNotFound`` or ``NotAllowedToChange``; an action that changes nothing
        (pausing a paused schedule) returns the schedule as it is."""
        found = await self._store.schedule(schedule_id)
        if found is None or found.status == "deleted":
            raise ScheduleNotFound(f"there is no schedule {schedule_id}")
        if conversation_id is not None:
            here = set(await self._store.conversation_scope(conversation_id))
            if here.isdisjoint((found.conversation_id, *found.targets)):
                raise ScheduleNotFound(f"schedule {schedule_id} is not one of this conversation's")
        if user != found.created_by and user not in self._admins:
            raise NotAllowedToChange(
                f"only {found.created_by} (who created {schedule_id}) or an admin may change it"
            )
        changed: ScheduleRecord | None
        if action == "pause":
            changed = await self._store.set_schedule_status(
                schedule_id, status="paused", allowed_from=("active",), actor=user
            )
        elif action == "resume":
            upcoming = self.recurrence(found).next_after(now or utcnow())
            if upcoming is None:
                # A one-shot whose time passed while paused: run it once now.
                upcoming = now or utcnow()
            changed = await self._store.set_schedule_status(
                schedule_id,
                status="active",
                allowed_from=("paused",),
                next_run_at=upcoming,
                actor=user,
            )
        else:
            changed = await self._store.set_schedule_status(
                schedule_id,
                status="deleted",
                allowed_from=("active", "paused", "done"),
                actor=user,
            )
        if changed is None:
            changed = await self._store.schedule(schedule_id)
            assert changed is not None
        return changed

    def plan(self, due: DueSchedule, *, now: datetime) -> tuple[list[datetime], datetime | None]:
        """What the dispatcher fires for a due schedule, and its next fire time."""
        recurrence = Recurrence.from_stored(due.kind, due.spec, due.timezone, due.anchor)
        return due_slots(
            recurrence,
            next_run_at=due.next_run_at,
            now=now,
            policy=due.missed,
            grace=self.limits.grace,
            catch_up_max=self.limits.catch_up_max,
        )

    @staticmethod
    def recurrence(schedule: ScheduleRecord) -> Recurrence:
        """The schedule's recurrence, rebuilt from its row."""
        return Recurrence.from_stored(
            schedule.kind, schedule.spec, schedule.timezone, schedule.anchor
        )

    def describe(self, schedule: ScheduleRecord) -> str:
        """One line: id, when, status, next run, the prompt."""
        when = self.recurrence(schedule).describe()
        status = schedule.status
        upcoming = (
            f", next {schedule.next_run_at:%Y-%m-%d %H:%M} UTC"
            if schedule.next_run_at is not None and status == "active"
            else ""
        )
        what = _clip(schedule.prompt, 80)
        if schedule.action == "message":
            what = f"reminder: {what}"
        elif schedule.notify == "if_notable":
            what = f"posts only when notable: {what}"
        if schedule.jitter_seconds:
            when += f" (within {_seconds(timedelta(seconds=schedule.jitter_seconds))})"
        return f"{schedule.id}: {when} [{status}{upcoming}]: {what}"


def _seconds(gap: timedelta) -> str:
    seconds = gap.total_seconds()
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    return f"{seconds:g}s"


def _clip(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"

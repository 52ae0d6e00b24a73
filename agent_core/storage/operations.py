"""What operators do and see (the console, ``chatgate forget``, retention) over the
database: the reads of :mod:`console`, the audit log, a person's export and erasure, and the
schedule changes only an operator makes (edit, run now)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from pydantic import JsonValue
from sqlalchemy import insert, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from agent_core.events import utcnow
from agent_core.records import PairingRequest
from agent_core.storage import access, audit, console, console_usage, erasure, feedback
from agent_core.storage.database import Database
from agent_core.storage.schedules import queue_run
from agent_core.storage.schema import maintenance, schedule_runs, schedule_targets, schedules
from agent_core.stores.operations import AuditEntry

Json = dict[str, JsonValue]
RETENTION_SLOT = "retention"


def _edit_schedule(
    conn: Connection,
    schedule_id: str,
    *,
    prompt: str | None,
    recurrence: tuple[str, str, str, datetime | None] | None,
    next_run_at: datetime | None,
    actor: str,
    now: datetime,
) -> bool:
    values: dict[str, Any] = {"updated_at": now}
    if prompt is not None:
        values["prompt"] = prompt
    if recurrence is not None:
        kind, spec, timezone, anchor = recurrence
        values.update(kind=kind, spec=spec, timezone=timezone, anchor=anchor, failures=0)
        if next_run_at is not None:
            values["next_run_at"] = next_run_at
    changed = conn.execute(
        update(schedules)
        .where(schedules.c.id == schedule_id, schedules.c.status.in_(("active", "paused")))
        .values(**values)
    ).rowcount
    if changed:
        fields = sorted(k for k in values if k not in ("updated_at", "failures"))
        audit.append(
            conn, actor=actor, action="schedule.edit", subject=schedule_id,
            detail={"fields": fields}, now=now,  # type: ignore[dict-item]
        )  # fmt: skip
    return bool(changed)


def _run_now(conn: Connection, schedule_id: str, *, actor: str, now: datetime) -> list[int]:
    """One run of the schedule at ``now``, off its timetable: a run row (its slot is now),
    and a queued turn and job per target, as the dispatcher makes them."""
    row = conn.execute(
        select(schedules).where(schedules.c.id == schedule_id, schedules.c.status != "deleted")
    ).first()
    if row is None:
        return []
    run_id = conn.execute(
        insert(schedule_runs).returning(schedule_runs.c.id),
        {"schedule_id": schedule_id, "scheduled_for": now, "created_at": now},
    ).scalar_one()
    targets = list(
        conn.execute(
            select(schedule_targets.c.conversation_id).where(
                schedule_targets.c.schedule_id == schedule_id
            )
        ).scalars()
    ) or [row.conversation_id]
    created = queue_run(conn, row, targets=targets, run_id=int(run_id), now=now)
    audit.append(
        conn, actor=actor, action="schedule.run_now", subject=schedule_id,
        detail={"jobs": created}, now=now,  # type: ignore[dict-item]
    )  # fmt: skip
    return created


def _retention_since(conn: Connection, *, margin: timedelta) -> datetime | None:
    """Where the last complete retention pass got to, less ``margin`` (rows whose turn
    was still open then); None when no pass finished yet."""
    last = conn.execute(
        select(maintenance.c.last_slot).where(maintenance.c.name == RETENTION_SLOT)
    ).scalar()
    return None if last is None else last - margin


def _retention_reached(conn: Connection, *, before: datetime) -> None:
    """A pass is complete up to ``before``: the next starts there (set only at the end of
    a pass, so one cut short by a restart or an error is made again whole)."""
    moved = conn.execute(
        update(maintenance)
        .where(maintenance.c.name == RETENTION_SLOT, maintenance.c.last_slot < before)
        .values(last_slot=before)
    ).rowcount
    if not moved:
        insert_row = _INSERT_IF_NEW[conn.dialect.name]
        conn.execute(insert_row, {"name": RETENTION_SLOT, "last_slot": before})


_INSERT_IF_NEW = {
    "sqlite": sqlite_insert(maintenance).on_conflict_do_nothing(),
    "postgresql": postgresql_insert(maintenance).on_conflict_do_nothing(),
}


def _listed(value: JsonValue) -> list[JsonValue]:
    return value if isinstance(value, list) else []


class Operations:
    """The operator's side of the database. Every transaction here runs off the event loop
    (``read_long``/``write_long``): a search, a sum over every model call or an erasure can
    take a while, and the gateway's other work must not wait for it."""

    def __init__(self, database: Database) -> None:
        self.database = database

    # -- reads for the console ---------------------------------------------------------

    async def conversations(self, **query: Any) -> Json:
        """A page of conversations (see ``console.conversations_page``)."""
        return await self.database.read_long(console.conversations_page, **query)

    async def conversation_messages(
        self, conversation_id: str, *, before: int | None, limit: int
    ) -> list[JsonValue]:
        """A page of one conversation's messages, newest first."""
        return await self.database.read_long(
            console.conversation_messages, conversation_id, before=before, limit=limit
        )

    async def turns(self, **query: Any) -> Json:
        """A page of turns (see ``console.turns_page``)."""
        return await self.database.read_long(console.turns_page, **query)

    async def timeline(self, turn_id: int) -> Json | None:
        """One turn's journal, approvals and receipts; None when there is no such turn."""
        return await self.database.read_long(console.timeline, turn_id)

    async def approvals(self, *, pending: bool, before: str | None, limit: int) -> Json:
        """Pending or decided approvals."""
        return await self.database.read_long(
            console.approvals_page, pending=pending, before=before, limit=limit
        )

    async def schedules(self, *, include_deleted: bool = False) -> list[Any]:
        """Every schedule with its targets and latest runs."""
        return await self.database.read_long(
            console.schedules_page, include_deleted=include_deleted
        )

    async def schedule_runs(self, schedule_id: str, *, limit: int = 50) -> list[JsonValue]:
        """One schedule's deliveries, newest first."""
        return await self.database.read_long(console.schedule_runs_of, schedule_id, limit=limit)

    async def people(self) -> Json:
        """Paired users, pending codes, access changes and usage per person."""
        return await self.database.read_long(console_usage.people, now=utcnow())

    async def usage(self, *, by: str, since: str) -> list[JsonValue]:
        """Spend per user, conversation, platform, model or day since a UTC day."""
        return await self.database.read_long(console_usage.usage, by=by, since=since)

    async def spend_today(self) -> Json:
        """Today's spend per person and in all; the conversations' totals."""
        return await self.database.read_long(
            console_usage.spend_today, day=utcnow().strftime("%Y-%m-%d")
        )

    async def totals(self) -> Json:
        """Every model call's tokens and dollars summed."""
        return await self.database.read_long(console_usage.totals)

    async def feedback(self, *, rating: str | None, before: int | None, limit: int) -> Json:
        """Rated turns, the newest rating first (``rating``: only ups or downs)."""
        return await self.database.read_long(
            feedback.page, rating=rating, before=before, limit=limit
        )

    async def feedback_totals(self, *, since: datetime) -> dict[str, int]:
        """👍 and 👎 given or changed since ``since``."""
        return await self.database.read_long(feedback.totals_since, since=since)

    async def platforms(self) -> list[str]:
        """The platforms the database has conversations of."""
        return await self.database.read_long(console_usage.platforms)

    async def health(self) -> Json:
        """Failures, recoveries and the oldest open turn, from the journal."""
        return await self.database.read_long(console_usage.health, now=utcnow())

    # -- the audit log ------------------------------------------------------------------

    async def audit(
        self,
        *,
        query: str | None = None,
        actor: str | None = None,
        action: str | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[AuditEntry]:
        """A page of the audit log, newest first."""
        return await self.database.read_long(
            audit.page, query=query, actor=actor, action=action, before=before, limit=limit
        )

    async def audit_chunk(self, *, query: str | None, after: int) -> list[AuditEntry]:
        """The export's next entries, oldest first."""
        return await self.database.read_long(audit.chunk, query=query, after=after)

    async def record(self, *, actor: str, action: str, **fields: Any) -> None:
        """Append an entry (settings read at start, a console action ...)."""
        await self.database.write_long(audit.append, actor=actor, action=action, **fields)

    async def prune_audit(self, *, before: datetime) -> int:
        """Remove audit entries older than ``before``."""
        return await self.database.write_long(audit.prune, before=before)

    # -- access -------------------------------------------------------------------------

    async def refuse_pairing(self, code: str, *, actor: str) -> PairingRequest:
        """Turn a pending pairing code down (``PairingRefused`` when it is not pending)."""
        return await self.database.write_long(access.refuse, code, actor=actor)

    # -- a person's data ----------------------------------------------------------------

    async def export_person(self, user: str) -> Json:
        """Everything held about ``user``."""
        return await self.database.read_long(erasure.export, user, now=utcnow())

    async def forget_person(
        self,
        user: str,
        *,
        actor: str,
        settle: float = 30.0,
        stop_here: Callable[[int], object] | None = None,
    ) -> tuple[Json, Json]:
        """Erase ``user``'s data; the receipt, and the files to remove. A turn of theirs
        that was running is asked to stop; whatever it wrote before it stopped (a reply, a
        step) is erased by a second pass once it has (waiting up to ``settle`` seconds).
        ``stop_here`` stops such a turn at once when this process runs it (elsewhere the
        journal's stop reaches it within seconds)."""
        receipt, left = await self.database.write_long(
            erasure.forget, user, actor=actor, now=utcnow()
        )
        if not receipt.get("running_turns"):
            return receipt, left
        if stop_here is not None:
            for turn_id in _listed(left.get("running")):
                stop_here(int(str(turn_id)))
        deadline = asyncio.get_running_loop().time() + settle
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.25)
            if not await self.database.read_long(erasure.running_turns, user):
                break
        again, more = await self.database.write_long(
            erasure.forget, user, actor=actor, now=utcnow()
        )
        for key, value in again.items():
            if isinstance(value, int) and key != "running_turns":
                current = receipt.get(key)
                receipt[key] = (current if isinstance(current, int) else 0) + value
        receipt["running_turns"] = again.get("running_turns")
        merged: Json = {}
        for key in ("blobs", "uploads", "conversations"):
            first, second = left.get(key), more.get(key)
            items = [
                *(first if isinstance(first, list) else []),
                *(second if isinstance(second, list) else []),
            ]
            merged[key] = list[JsonValue](sorted({str(v) for v in items}))
        return receipt, merged

    async def expire_old(self, *, days: float, actor: str = "chatgate:retention") -> Json:
        """The retention pass: the content of what is older than ``days`` goes, a few
        hundred turns and a few thousand messages per transaction (the first pass over a
        large history is long, and the database stays free for the turns that run
        meanwhile)."""
        before = utcnow() - timedelta(days=days)
        since = await self.database.read_long(_retention_since, margin=timedelta(days=2))
        turn_ids = await self.database.read_long(
            erasure.expirable_turns, before=before, since=since
        )
        steps = 0
        for start in range(0, len(turn_ids), 200):
            chunk = turn_ids[start : start + 200]
            steps += await self.database.write_long(erasure.expire_turns, chunk)
        changed, after = 0, 0
        while True:
            count, last = await self.database.write_long(
                erasure.expire_message_batch, before=before, since=since, after_id=after, limit=2000
            )
            changed += count
            if last is None:
                break
            after = last
        done = await self.database.write_long(
            erasure.expire_rest,
            before=before,
            since=since,
            messages_changed=changed,
            steps=steps,
            actor=actor,
        )
        await self.database.write_long(_retention_reached, before=before)
        return done

    # -- schedules ----------------------------------------------------------------------

    async def edit_schedule(
        self,
        schedule_id: str,
        *,
        prompt: str | None,
        recurrence: tuple[str, str, str, datetime | None] | None,
        next_run_at: datetime | None,
        actor: str,
    ) -> bool:
        """Change a live schedule's prompt and/or timetable; False when it is not live."""
        return await self.database.write_long(
            _edit_schedule,
            schedule_id,
            prompt=prompt,
            recurrence=recurrence,
            next_run_at=next_run_at,
            actor=actor,
            now=utcnow(),
        )

    async def run_schedule_now(self, schedule_id: str, *, actor: str) -> list[int]:
        """Queue one run now; the jobs to hand to the queue (none: no such schedule)."""
        return await self.database.write_long(_run_now, schedule_id, actor=actor, now=utcnow())

"""Schedules and their runs: the transactions behind ``Store``'s schedule methods.

The dispatcher's claim is one transaction: due rows are read through the
``(status, next_run_at)`` index (PostgreSQL locks them with ``FOR UPDATE SKIP LOCKED``,
so two dispatchers take different rows; SQLite has one writer at a time), each fired slot
is inserted under ``UNIQUE(schedule_id, scheduled_for)`` and only a slot that was new gets
its turns and jobs, and the row moves on to its next fire time. Two dispatchers racing
over the same slots therefore fire each one exactly once.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import bindparam, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Row

from agent_core.events import utcnow
from agent_core.records import (
    CATCH_UP,
    DueSchedule,
    JobKind,
    NewSchedule,
    Planner,
    ScheduleRecord,
    ScheduleStatus,
)
from agent_core.scheduling.jitter import start_of
from agent_core.scheduling.recurrence import ScheduleError
from agent_core.storage import audit
from agent_core.storage.schema import (
    conversations,
    jobs,
    schedule_runs,
    schedule_targets,
    schedules,
    turns,
)

"""Given a due schedule: the slots to fire now, and the next fire time (None: no more)."""

# Runs, turns and jobs written many rows per statement (insertmanyvalues); the runs'
# RETURNING names each row's slot, since a slot already fired returns nothing.
_INSERT_RUNS = {
    name: dialect.insert(schedule_runs)
    .on_conflict_do_nothing(index_elements=["schedule_id", "scheduled_for"])
    .returning(schedule_runs.c.id, schedule_runs.c.schedule_id, schedule_runs.c.scheduled_for)
    for name, dialect in (("sqlite", sqlite), ("postgresql", postgresql))
}
_INSERT_TURNS = insert(turns).returning(turns.c.id, sort_by_parameter_order=True)
_INSERT_JOBS = insert(jobs).returning(jobs.c.id, sort_by_parameter_order=True)
_MOVE_ON = (
    update(schedules)
    .where(schedules.c.id == bindparam("b_id"))
    .values(
        next_run_at=bindparam("b_next"),
        status=bindparam("b_status"),
        updated_at=bindparam("b_now"),
    )
)
_DUE = (
    select(schedules)
    .where(schedules.c.status == "active", schedules.c.next_run_at <= bindparam("b_now"))
    .order_by(schedules.c.next_run_at)
    .limit(bindparam("b_limit"))
)
_TARGETS = select(schedule_targets.c.schedule_id, schedule_targets.c.conversation_id)


# The stored missed-run policy as ``catch_up`` names it.
POLICY_NAMES = {stored: said for said, stored in CATCH_UP.items()}


def new_schedule_id() -> str:
    """Short enough to type: ``sc_`` and 8 hex digits (32 random bits)."""
    return f"sc_{secrets.token_hex(4)}"


def create(conn: Connection, new: NewSchedule) -> tuple[ScheduleRecord, bool]:
    """Store a schedule; with a ``creation_key`` seen before, return that one (False)."""
    if new.creation_key is not None:
        existing = conn.execute(
            select(schedules.c.id).where(schedules.c.creation_key == new.creation_key)
        ).scalar()
        if existing is not None:
            found = load_schedule(conn, str(existing))
            assert found is not None
            return found, False
    if new.limit is not None:
        live = conn.execute(
            select(func.count())
            .select_from(schedules)
            .where(
                schedules.c.conversation_id == new.conversation_id,
                schedules.c.status.in_(("active", "paused")),
            )
        ).scalar_one()
        if live >= new.limit:
            raise ScheduleError(
                f"this conversation has {live} schedules, the most allowed (setting "
                "schedules_per_conversation); cancel one first"
            )
    now = utcnow()
    schedule_id = new_schedule_id()
    conn.execute(
        insert(schedules),
        {
            "id": schedule_id,
            "conversation_id": new.conversation_id,
            "created_by": new.created_by,
            "prompt": new.prompt,
            "kind": new.kind,
            "spec": new.spec,
            "timezone": new.timezone,
            "anchor": new.anchor,
            "missed": new.missed,
            "status": "active",
            "next_run_at": new.next_run_at,
            "failures": 0,
            "creation_key": new.creation_key,
            "jitter_seconds": new.jitter_seconds,
            "action": new.action,
            "notify": new.notify,
            "created_at": now,
            "updated_at": now,
        },
    )
    conn.execute(
        insert(schedule_targets),
        [{"schedule_id": schedule_id, "conversation_id": c} for c in new.targets],
    )
    created = load_schedule(conn, schedule_id)
    assert created is not None
    return created, True


def load_schedule(conn: Connection, schedule_id: str) -> ScheduleRecord | None:
    """One schedule by id, with its targets."""
    row = conn.execute(select(schedules).where(schedules.c.id == schedule_id)).first()
    if row is None:
        return None
    targets = conn.execute(
        select(schedule_targets.c.conversation_id).where(
            schedule_targets.c.schedule_id == schedule_id
        )
    ).scalars()
    return record(row, targets=tuple(str(t) for t in targets))


def scope(conn: Connection, conversation_id: str) -> list[str]:
    """The conversations whose schedules ``jobs`` shows here: this one, and when it is a
    channel's own conversation (not a thread), the channel's threads too (a Slack slash
    command comes from the channel, while mentions make thread conversations)."""
    row = conn.execute(
        select(
            conversations.c.platform,
            conversations.c.workspace,
            conversations.c.channel,
            conversations.c.thread,
        ).where(conversations.c.id == conversation_id)
    ).first()
    if row is None or row.thread:
        return [conversation_id]
    query = select(conversations.c.id).where(
        conversations.c.platform == row.platform,
        conversations.c.workspace == row.workspace,
        conversations.c.channel == row.channel,
    )
    return [str(i) for i in conn.execute(query).scalars()]


def for_conversation(conn: Connection, conversation_ids: list[str]) -> list[ScheduleRecord]:
    """Schedules created in these conversations or delivering to them (not deleted),
    oldest first."""
    targeted = select(schedule_targets.c.schedule_id).where(
        schedule_targets.c.conversation_id.in_(conversation_ids)
    )
    rows = conn.execute(
        select(schedules)
        .where(
            or_(
                schedules.c.conversation_id.in_(conversation_ids),
                schedules.c.id.in_(targeted),
            ),
            schedules.c.status != "deleted",
        )
        .order_by(schedules.c.created_at, schedules.c.id)
    ).all()
    ids = [row.id for row in rows]
    by_schedule: dict[str, list[str]] = {i: [] for i in ids}
    if ids:
        for schedule_id, target in conn.execute(
            _TARGETS.where(schedule_targets.c.schedule_id.in_(ids))
        ).all():
            by_schedule[schedule_id].append(target)
    return [record(row, targets=tuple(by_schedule[row.id])) for row in rows]


def set_status(
    conn: Connection,
    schedule_id: str,
    *,
    status: ScheduleStatus,
    allowed_from: tuple[ScheduleStatus, ...],
    next_run_at: datetime | None = None,
    actor: str | None = None,
) -> ScheduleRecord | None:
    """Compare-and-set a schedule's status (and, when given, its next fire time); None
    when it was not in one of ``allowed_from``. A change ``actor`` made is audited."""
    values: dict[str, Any] = {"status": status, "updated_at": utcnow()}
    if next_run_at is not None:
        values["next_run_at"] = next_run_at
        values["failures"] = 0
    changed = conn.execute(
        update(schedules)
        .where(schedules.c.id == schedule_id, schedules.c.status.in_(allowed_from))
        .values(**values)
    ).rowcount
    if changed and actor is not None:
        verb = {"paused": "pause", "active": "resume", "deleted": "delete"}.get(status, status)
        audit.append(conn, actor=actor, action=f"schedule.{verb}", subject=schedule_id)
    return load_schedule(conn, schedule_id) if changed else None


@dataclass(frozen=True, slots=True)
class RunToQueue:
    """A fired slot to deliver: its run and where it goes."""

    schedule_id: str
    run_id: int
    user: str
    prompt: str
    targets: Sequence[str]
    # When its jobs may start (None: now); a jittered run's moment in its window.
    due_at: datetime | None = None
    # "turn", or "message": post the prompt as it is (a reminder).
    kind: JobKind = "turn"
    # Its turns post only what their model marks notable (``notify = "if_notable"``).
    quiet: bool = False


def queued_turn_row(
    *,
    conversation_id: str,
    user: str,
    prompt: str,
    reply_to: str | None,
    now: datetime,
    quiet: bool = False,
) -> dict[str, Any]:
    """A turn run by a job rather than by the conversation's lane, as a row to insert."""
    return {"conversation_id": conversation_id, "user_id": user, "reply_to": reply_to,
            "status": "pending", "attempts": 0, "lane": "queued", "prompt": prompt,
            "quiet": quiet, "created_at": now}  # fmt: skip


def job_row(
    *,
    turn_id: int,
    conversation_id: str,
    now: datetime,
    schedule_id: str | None = None,
    run_id: int | None = None,
    not_before: datetime | None = None,
    kind: JobKind = "turn",
) -> dict[str, Any]:
    """A queued job for a queued turn (``kind`` "message": its prompt is posted as it is),
    due ``not_before`` (default now), as a row."""
    return {"kind": kind, "turn_id": turn_id, "conversation_id": conversation_id,
            "schedule_id": schedule_id, "run_id": run_id, "status": "queued", "attempts": 0,
            "not_before": max(not_before or now, now), "created_at": now}  # fmt: skip


def queue_runs(conn: Connection, runs: Sequence[RunToQueue], *, now: datetime) -> list[int]:
    """Every run's deliveries, set-based: a queued turn and its job per target
    conversation, each kind in one multi-row INSERT (SQLAlchemy's insertmanyvalues, ids
    back in parameter order); the jobs, in order."""
    wanted = [(run, target) for run in runs for target in run.targets]
    if not wanted:
        return []
    turn_ids = conn.execute(
        _INSERT_TURNS,
        [
            queued_turn_row(conversation_id=target, user=run.user, prompt=run.prompt,
                            reply_to=None, now=now, quiet=run.quiet)
            for run, target in wanted
        ],
    ).scalars().all()  # fmt: skip
    job_ids = conn.execute(
        _INSERT_JOBS,
        [
            job_row(turn_id=turn_id, conversation_id=target, now=now,
                    schedule_id=run.schedule_id, run_id=run.run_id, not_before=run.due_at,
                    kind=run.kind)
            for (run, target), turn_id in zip(wanted, turn_ids, strict=True)
        ],
    ).scalars().all()  # fmt: skip
    return [int(job_id) for job_id in job_ids]


def queue_run(
    conn: Connection, schedule: Row[Any], *, targets: Sequence[str], run_id: int, now: datetime
) -> list[int]:
    """One run's deliveries: a queued turn and its job per target conversation; the jobs."""
    return queue_runs(conn, [to_queue(schedule, run_id=run_id, targets=targets)], now=now)


def to_queue(
    schedule: Row[Any], *, run_id: int, targets: Sequence[str], due_at: datetime | None = None
) -> RunToQueue:
    """What a run of this schedule (a row of ``schedules``) queues."""
    message = schedule.action == "message"
    return RunToQueue(schedule_id=schedule.id, run_id=run_id, user=schedule.created_by,
                      prompt=schedule.prompt, targets=targets, due_at=due_at,
                      kind="message" if message else "turn",
                      quiet=not message and schedule.notify == "if_notable")  # fmt: skip


def dispatch_due(
    conn: Connection, *, now: datetime, plan: Planner, limit: int
) -> tuple[int, list[int]]:
    """Claim up to ``limit`` due schedules, fire their slots, move them on, set-based: one
    read of the due rows (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so dispatchers split a
    burst), one of their targets, and one multi-row statement each for the runs (a slot
    another dispatcher fired is skipped by the unique key), the turns, the jobs and the
    schedules' next fire times. A run of a schedule with jitter is due at its moment in
    the window (``jitter.start_of``): its jobs wait in the table until then.

    Returns (how many schedules were claimed, the ids of the jobs created that are due
    now; the later ones the runner claims, or the dispatcher sends, when their time comes).
    """
    query = _DUE
    if conn.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)
    rows = conn.execute(query, {"b_now": now, "b_limit": limit}).all()
    if not rows:
        return 0, []
    ids = [row.id for row in rows]
    targets: dict[str, list[str]] = {i: [] for i in ids}
    for schedule_id, target in conn.execute(
        _TARGETS.where(schedule_targets.c.schedule_id.in_(ids))
    ).all():
        targets[schedule_id].append(target)
    fired: list[dict[str, Any]] = []
    moved: list[dict[str, Any]] = []
    skipped: list[tuple[Row[Any], datetime, datetime]] = []
    for row in rows:
        due = DueSchedule(
            id=row.id,
            kind=row.kind,
            spec=row.spec,
            timezone=row.timezone,
            anchor=row.anchor,
            missed=row.missed,
            next_run_at=row.next_run_at,
        )
        slots, following = plan(due)
        pending = _instant(row.next_run_at)
        if pending <= now and (not slots or _instant(slots[0]) > pending):
            # Missed slots the schedule's policy drops: none goes without a trace.
            until = _instant(slots[0]) if slots else now
            skipped.append((row, pending, until))
        fired += [{"schedule_id": row.id, "scheduled_for": slot, "created_at": now,
                   "due_at": start_of(row.id, slot, row.jitter_seconds), "started_at": None}
                  for slot in slots]  # fmt: skip
        moved.append(
            {"b_id": row.id, "b_next": following,
             "b_status": "active" if following is not None else "done", "b_now": now}
        )  # fmt: skip
    created: list[int] = []
    if fired:
        inserted = conn.execute(_INSERT_RUNS[conn.dialect.name], fired).all()
        by_schedule = {row.id: row for row in rows}
        # Runs in the order they were asked for; a slot fired elsewhere returns no row.
        run_of = {(r.schedule_id, _instant(r.scheduled_for)): int(r.id) for r in inserted}
        runs = [
            to_queue(by_schedule[f["schedule_id"]], run_id=run_of[key],
                     targets=targets[f["schedule_id"]], due_at=f["due_at"])
            for f in fired
            if (key := (f["schedule_id"], _instant(f["scheduled_for"]))) in run_of
        ]  # fmt: skip
        jobs_made = queue_runs(conn, runs, now=now)
        ready = [run.due_at is None or run.due_at <= now for run in runs for _ in run.targets]
        created = [job for job, now_due in zip(jobs_made, ready, strict=True) if now_due]
    conn.execute(_MOVE_ON, moved)
    for row, since, until in skipped:
        audit.append(
            conn, actor="dispatcher", action="schedule.missed", subject=row.id,
            conversation_id=row.conversation_id, now=now,
            detail={"from": since.isoformat(), "until": until.isoformat(),
                    "catch_up": POLICY_NAMES.get(row.missed, row.missed)},
        )  # fmt: skip
    return len(rows), created


def _instant(moment: datetime) -> datetime:
    """A slot as one key whatever the driver returned (aware, UTC)."""
    return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)


def record(row: Row[Any], *, targets: tuple[str, ...] = ()) -> ScheduleRecord:
    return ScheduleRecord(
        id=row.id,
        conversation_id=row.conversation_id,
        created_by=row.created_by,
        prompt=row.prompt,
        kind=row.kind,
        spec=row.spec,
        timezone=row.timezone,
        anchor=row.anchor,
        missed=row.missed,
        status=row.status,
        next_run_at=row.next_run_at,
        failures=int(row.failures),
        created_at=row.created_at,
        targets=targets,
        jitter_seconds=int(row.jitter_seconds),
        action=row.action,
        notify=row.notify,
    )


def with_runs(conn: Connection, conversation_id: str, *, runs: int) -> list[ScheduleRecord]:
    """The schedules ``jobs`` shows in this conversation, each with its latest ``runs``
    deliveries here."""
    from agent_core.storage.jobs import runs_of  # jobs imports this module

    ids = scope(conn, conversation_id)
    found = for_conversation(conn, ids)
    if not runs or not found:
        return found
    history = runs_of(conn, [s.id for s in found], conversation_ids=ids, per_schedule=runs)
    return [dataclasses.replace(s, runs=tuple(history[s.id])) for s in found]

"""How late schedule runs start, and the signs of life that explain it: the transactions
behind ``Store``'s lag methods (``/metrics``, ``chatgate doctor``, the dispatcher's sleep).

A run's lag is ``started_at - due_at``: from the moment it was planned to start (its slot,
or its moment in the schedule's jitter window) to the claim of its first job.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import and_, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from agent_core.records import LATE_AFTER, LagReport, StartedRun
from agent_core.storage.schema import beats, schedule_runs, schedules
from agent_core.storage.schema import jobs as job_table

_UPSERT = {
    name: dialect.insert(beats).on_conflict_do_update(
        index_elements=["role", "owner"], set_={"beat_at": dialect.insert(beats).excluded.beat_at}
    )
    for name, dialect in (("sqlite", sqlite), ("postgresql", postgresql))
}


def beat(conn: Connection, role: str, *, owner: str, now: datetime) -> None:
    """``owner`` (a dispatcher, an embedded runner) is alive at ``now``."""
    conn.execute(_UPSERT[conn.dialect.name], {"role": role, "owner": owner, "beat_at": now})


def _lag(due_at: datetime | None, scheduled_for: datetime, started_at: datetime) -> float:
    return max(0.0, (started_at - (due_at or scheduled_for)).total_seconds())


def started_since(conn: Connection, after: datetime, *, limit: int = 100_000) -> list[StartedRun]:
    """Runs whose first turn started after ``after``, oldest first."""
    rows = conn.execute(
        select(
            schedule_runs.c.id,
            schedule_runs.c.due_at,
            schedule_runs.c.scheduled_for,
            schedule_runs.c.started_at,
        )
        .where(schedule_runs.c.started_at > after)
        .order_by(schedule_runs.c.started_at)
        .limit(limit)
    ).all()
    return [
        StartedRun(int(row.id), row.started_at, _lag(row.due_at, row.scheduled_for, row.started_at))
        for row in rows
    ]


def next_due(conn: Connection, *, jobs: bool) -> datetime | None:
    """The earliest moment something becomes due: an active schedule's next slot, or
    (with ``jobs``) a queued job not handed to a broker yet (a jittered run, a retry)."""
    slot = conn.execute(
        select(func.min(schedules.c.next_run_at)).where(schedules.c.status == "active")
    ).scalar()
    if not jobs:
        return slot
    job = conn.execute(
        select(func.min(job_table.c.not_before)).where(
            and_(job_table.c.status == "queued", job_table.c.enqueued_at.is_(None))
        )
    ).scalar()
    found = [moment for moment in (slot, job) if moment is not None]
    return min(found) if found else None


def report(conn: Connection, *, now: datetime, window: timedelta) -> LagReport:
    """Runs started within ``window`` (how many, how many late, the worst lag), runs due
    that long ago and not started, schedules whose slot passed over a minute ago and were
    not fired (the dispatcher is behind or down), and each role's last beat."""
    since = now - window
    started = started_since(conn, since)
    lags = [run.lag for run in started]
    waiting = conn.execute(
        select(func.count())
        .select_from(schedule_runs)
        .where(
            schedule_runs.c.started_at.is_(None),
            func.coalesce(schedule_runs.c.due_at, schedule_runs.c.scheduled_for) < now - LATE_AFTER,
            schedule_runs.c.created_at > since,
        )
    ).scalar_one()
    overdue = conn.execute(
        select(func.count())
        .select_from(schedules)
        .where(schedules.c.status == "active", schedules.c.next_run_at < now - LATE_AFTER)
    ).scalar_one()
    last = {
        str(role): at
        for role, at in conn.execute(
            select(beats.c.role, func.max(beats.c.beat_at)).group_by(beats.c.role)
        ).all()
    }
    return LagReport(
        started=len(lags),
        late=sum(lag > LATE_AFTER.total_seconds() for lag in lags),
        worst=max(lags, default=None),
        waiting=int(waiting),
        overdue=int(overdue),
        beats=last,
    )

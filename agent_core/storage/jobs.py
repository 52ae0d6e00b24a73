"""Jobs: queued turns (schedule runs, ``bg``) and the transactions behind ``Store``'s job
methods.

A job row is the durable truth about queued work in both profiles. Whoever runs a job
first takes its lease with a compare-and-set (``claim``): a queued job whose time has come,
or a running one whose lease expired (its worker died). The embedded runner claims the
next such row itself; the Celery profile sends job ids to the broker and the task claims
the row it was given, so a duplicate message or a redelivery after a crash is a no-op.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, bindparam, func, insert, or_, select, update
from sqlalchemy.engine import Connection, Row

from agent_core.events import utcnow
from agent_core.records import JobOutcome, JobRecord, JobStatus, RunRecord, TurnStatus
from agent_core.storage import journal
from agent_core.storage.schedules import job_row, load_schedule, queued_turn_row
from agent_core.storage.schema import jobs, messages, schedule_runs, schedules, turns

_CLAIMABLE = or_(
    and_(jobs.c.status == "queued", jobs.c.not_before <= bindparam("b_now")),
    and_(jobs.c.status == "running", jobs.c.lease_expires_at < bindparam("b_now")),
)
_CLAIM_MANY = (
    update(jobs)
    .where(jobs.c.id.in_(bindparam("b_ids", expanding=True)), _CLAIMABLE)
    .values(
        status="running",
        attempts=jobs.c.attempts + 1,
        lease_owner=bindparam("b_owner"),
        lease_expires_at=bindparam("b_until"),
    )
    .returning(*jobs.c)
)
_NEXT = (
    select(jobs.c.id)
    .where(_CLAIMABLE)
    .order_by(jobs.c.not_before, jobs.c.id)
    .limit(bindparam("b_limit"))
)
# A run has started when the first of its jobs is claimed; later claims (a retry, another
# target) leave the moment as it was.
_STARTED = (
    update(schedule_runs)
    .where(
        schedule_runs.c.id.in_(bindparam("b_runs", expanding=True)),
        schedule_runs.c.started_at.is_(None),
    )
    .values(started_at=bindparam("b_now"))
)
_RENEW = (
    update(jobs)
    .where(
        jobs.c.id == bindparam("b_id"),
        jobs.c.status == "running",
        jobs.c.lease_owner == bindparam("b_owner"),
    )
    .values(lease_expires_at=bindparam("b_until"))
)
_OWNED = and_(
    jobs.c.id == bindparam("b_id"),
    jobs.c.status == "running",
    jobs.c.lease_owner == bindparam("b_owner"),
)
_RECEIPT = (
    select(messages.c.platform_message_id)
    .where(
        messages.c.turn_id == bindparam("b_turn"),
        messages.c.delivery_key.is_not(None),
        messages.c.role.in_(("assistant", "system")),
    )
    .order_by(messages.c.id.desc())
    .limit(1)
)


def insert_job(
    conn: Connection,
    *,
    turn_id: int,
    conversation_id: str,
    now: datetime,
    schedule_id: str | None = None,
    run_id: int | None = None,
) -> int:
    """A queued job for a queued turn, due now."""
    row = job_row(
        turn_id=turn_id,
        conversation_id=conversation_id,
        now=now,
        schedule_id=schedule_id,
        run_id=run_id,
    )
    return int(conn.execute(insert(jobs).returning(jobs.c.id), row).scalar_one())


def insert_queued_turn(
    conn: Connection,
    *,
    conversation_id: str,
    user: str,
    prompt: str,
    reply_to: str | None,
    now: datetime,
) -> int:
    """A turn run by a job rather than by the conversation's lane."""
    row = queued_turn_row(
        conversation_id=conversation_id, user=user, prompt=prompt, reply_to=reply_to, now=now
    )
    return int(conn.execute(insert(turns).returning(turns.c.id), row).scalar_one())


def background(
    conn: Connection, conversation_id: str, *, user: str, prompt: str, reply_to: str | None
) -> int:
    """``bg PROMPT``: a queued turn and its job; returns the job id."""
    now = utcnow()
    turn_id = insert_queued_turn(
        conn,
        conversation_id=conversation_id,
        user=user,
        prompt=prompt,
        reply_to=reply_to,
        now=now,
    )
    return insert_job(conn, turn_id=turn_id, conversation_id=conversation_id, now=now)


def claim(conn: Connection, job_id: int | None, *, owner: str, ttl: float) -> JobRecord | None:
    """Take a job's lease: the given one, or the next claimable one (``job_id`` None)."""
    if job_id is None:
        found = claim_many(conn, owner=owner, ttl=ttl, limit=1)
        return found[0] if found else None
    now = utcnow()
    params = {"b_ids": [job_id], "b_now": now, "b_owner": owner,
              "b_until": now + timedelta(seconds=ttl)}  # fmt: skip
    row = conn.execute(_CLAIM_MANY, params).first()
    if row is None:
        return None
    _mark_started(conn, [row], now=now)
    return _job(row)


def claim_many(conn: Connection, *, owner: str, ttl: float, limit: int) -> list[JobRecord]:
    """Take the leases of up to ``limit`` claimable jobs, oldest due first, in one
    statement (PostgreSQL skips rows another runner is taking)."""
    now = utcnow()
    query = _NEXT
    if conn.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)
    ids = list(conn.execute(query, {"b_now": now, "b_limit": limit}).scalars())
    if not ids:
        return []
    params = {"b_ids": ids, "b_now": now, "b_owner": owner,
              "b_until": now + timedelta(seconds=ttl)}  # fmt: skip
    rows = sorted(conn.execute(_CLAIM_MANY, params).all(), key=lambda r: ids.index(r.id))
    _mark_started(conn, rows, now=now)
    return [_job(row) for row in rows]


def _mark_started(conn: Connection, rows: list[Row[Any]], *, now: datetime) -> None:
    """The schedule runs of these just-claimed jobs have started (the first time)."""
    runs = sorted({int(row.run_id) for row in rows if row.run_id is not None})
    if runs:
        conn.execute(_STARTED, {"b_runs": runs, "b_now": now})


def renew(conn: Connection, job_id: int, *, owner: str, ttl: float) -> bool:
    """Extend a lease this owner still holds."""
    params = {"b_id": job_id, "b_owner": owner, "b_until": utcnow() + timedelta(seconds=ttl)}
    return conn.execute(_RENEW, params).rowcount == 1


def retry(conn: Connection, job_id: int, *, owner: str, at: datetime, error: str) -> bool:
    """Put a job back in the queue, due at ``at`` (backoff), and let go of it."""
    statement = (
        update(jobs)
        .where(_OWNED)
        .values(
            status="queued",
            not_before=at,
            enqueued_at=None,
            lease_owner=None,
            lease_expires_at=None,
            error=error,
        )
    )
    return conn.execute(statement, {"b_id": job_id, "b_owner": owner}).rowcount == 1


def hand_back(conn: Connection, job_id: int, *, owner: str) -> bool:
    """This process stops (a drain) before the job ended: due again now, for anyone, and
    the attempt it was on does not count."""
    statement = (
        update(jobs)
        .where(_OWNED)
        .values(
            status="queued",
            not_before=utcnow(),
            enqueued_at=None,
            lease_owner=None,
            lease_expires_at=None,
            attempts=func.max(jobs.c.attempts - 1, 0)
            if conn.dialect.name == "sqlite"
            else func.greatest(jobs.c.attempts - 1, 0),
        )
    )
    return conn.execute(statement, {"b_id": job_id, "b_owner": owner}).rowcount == 1


def wait(conn: Connection, job_id: int, *, owner: str) -> None:
    """The job's turn waits for a person; a decision puts it back in the queue."""
    statement = (
        update(jobs).where(_OWNED).values(status="waiting", lease_owner=None, lease_expires_at=None)
    )
    conn.execute(statement, {"b_id": job_id, "b_owner": owner})


def requeue_waiting(conn: Connection, turn_id: int) -> list[int]:
    """A decision came for a queued turn: its waiting job is due again."""
    statement = (
        update(jobs)
        .where(jobs.c.turn_id == turn_id, jobs.c.status == "waiting")
        .values(status="queued", not_before=utcnow(), enqueued_at=None)
        .returning(jobs.c.id)
    )
    return [int(i) for i in conn.execute(statement).scalars()]


def finish(
    conn: Connection,
    job_id: int,
    *,
    owner: str,
    turn_status: TurnStatus,
    error: str | None,
    failure_limit: int,
    pause_note: str,
) -> JobOutcome | None:
    """Close a job with its turn's outcome and receipt; count the schedule's failures.

    ``failure_limit`` failures in a row pause the schedule, with ``pause_note`` (formatted
    with ``id`` and ``failures``) added to the job's conversation. None when the lease was
    lost (someone else owns the job now).
    """
    row = conn.execute(select(jobs).where(_OWNED), {"b_id": job_id, "b_owner": owner}).first()
    if row is None:
        return None
    now = utcnow()
    receipt = conn.execute(_RECEIPT, {"b_turn": row.turn_id}).scalar()
    status: JobStatus = "done" if turn_status == "done" else "failed"
    conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id)
        .values(
            status=status,
            receipt=receipt,
            error=error,
            finished_at=now,
            lease_owner=None,
            lease_expires_at=None,
        )
    )
    if row.schedule_id is None:
        return JobOutcome()
    if status == "done":
        conn.execute(update(schedules).where(schedules.c.id == row.schedule_id).values(failures=0))
        return JobOutcome()
    conn.execute(
        update(schedules)
        .where(schedules.c.id == row.schedule_id)
        .values(failures=schedules.c.failures + 1, updated_at=now)
    )
    paused = conn.execute(
        update(schedules)
        .where(
            schedules.c.id == row.schedule_id,
            schedules.c.status == "active",
            schedules.c.failures >= failure_limit,
        )
        .values(status="paused", updated_at=now)
    ).rowcount
    if not paused:
        return JobOutcome()
    schedule = load_schedule(conn, row.schedule_id)
    assert schedule is not None
    note_id = int(
        conn.execute(
            journal.INSERT_MESSAGE,
            {
                "conversation_id": row.conversation_id,
                "role": "system",
                "text": pause_note.format(id=schedule.id, failures=schedule.failures),
                "turn_id": row.turn_id,
                "delivery_key": f"job:{job_id}:paused",
                "created_at": now,
            },
        ).scalar_one()
    )
    return JobOutcome(paused=schedule, note_id=note_id)


def reminder(conn: Connection, job_id: int, *, owner: str) -> tuple[int, str, str | None] | None:
    """A ``message`` job's post: its text (the queued turn's prompt) stored once as the
    turn's answer, keyed ``job:ID:message``, and the turn done. (The note's id, the text,
    its receipt when it was already delivered); None when the job is no longer ours."""
    row = conn.execute(select(jobs).where(_OWNED), {"b_id": job_id, "b_owner": owner}).first()
    if row is None or row.turn_id is None:
        return None
    key = f"job:{job_id}:message"
    found = conn.execute(
        select(messages.c.id, messages.c.text, messages.c.platform_message_id).where(
            messages.c.delivery_key == key
        )
    ).first()
    if found is not None:
        return int(found.id), str(found.text), found.platform_message_id
    text = str(conn.execute(select(turns.c.prompt).where(turns.c.id == row.turn_id)).scalar())
    note_id = conn.execute(
        journal.INSERT_MESSAGE,
        {"conversation_id": row.conversation_id, "role": "assistant", "text": text,
         "turn_id": row.turn_id, "delivery_key": key, "created_at": utcnow()},
    ).scalar_one()  # fmt: skip
    journal.finish_turn(conn, int(row.turn_id), status="done", error=None)
    return int(note_id), text, None


def run_times(conn: Connection, run_id: int) -> tuple[datetime, datetime | None] | None:
    """A schedule run's planned start (its slot, or its jitter moment) and its start."""
    row = conn.execute(
        select(
            func.coalesce(schedule_runs.c.due_at, schedule_runs.c.scheduled_for),
            schedule_runs.c.started_at,
        ).where(schedule_runs.c.id == run_id)
    ).first()
    return None if row is None else (row[0], row[1])


def job_note(
    conn: Connection, job_id: int, what: str, text: str, *, owner: str
) -> tuple[int, str | None] | None:
    """A system note of a job, stored once (keyed ``job:ID:WHAT``): (its id, its receipt
    when delivered); None when the job is no longer ours."""
    row = conn.execute(select(jobs).where(_OWNED), {"b_id": job_id, "b_owner": owner}).first()
    if row is None:
        return None
    key = f"job:{job_id}:{what}"
    found = conn.execute(
        select(messages.c.id, messages.c.platform_message_id).where(messages.c.delivery_key == key)
    ).first()
    if found is not None:
        return int(found.id), found.platform_message_id
    note_id = conn.execute(
        journal.INSERT_MESSAGE,
        {"conversation_id": row.conversation_id, "role": "system", "text": text,
         "turn_id": row.turn_id, "delivery_key": key, "created_at": utcnow()},
    ).scalar_one()  # fmt: skip
    return int(note_id), None


def note_sent(conn: Connection, note_id: int, *, receipt: str) -> None:
    """The pause note was delivered."""
    conn.execute(
        update(messages).where(messages.c.id == note_id).values(platform_message_id=receipt)
    )


def to_send(conn: Connection, *, now: datetime, resend_after: timedelta) -> list[int]:
    """Jobs a broker should (again) be given: due and never sent (or sent long ago with
    no worker taking them: a broker that lost its data, or a worker that died holding the
    message), and running ones whose worker died (the lease expired) that were not resent
    since, or were resent long ago and no worker took them (that message went the same
    way)."""
    stale = now - resend_after
    query = (
        select(jobs.c.id)
        .where(
            or_(
                and_(
                    jobs.c.status == "queued",
                    jobs.c.not_before <= now,
                    or_(jobs.c.enqueued_at.is_(None), jobs.c.enqueued_at < stale),
                ),
                and_(
                    jobs.c.status == "running",
                    jobs.c.lease_expires_at < now,
                    or_(
                        jobs.c.enqueued_at.is_(None),
                        jobs.c.enqueued_at < jobs.c.lease_expires_at,
                        jobs.c.enqueued_at < stale,
                    ),
                ),
            )
        )
        .order_by(jobs.c.id)
        .limit(1000)
    )
    return [int(i) for i in conn.execute(query).scalars()]


def mark_sent(conn: Connection, job_ids: list[int], *, now: datetime) -> None:
    """Record that these jobs were handed to the broker."""
    if job_ids:
        conn.execute(update(jobs).where(jobs.c.id.in_(job_ids)).values(enqueued_at=now))


def depth(conn: Connection, *, now: datetime) -> tuple[dict[str, int], float]:
    """How many jobs are in each unfinished state, and how many seconds the oldest due
    queued job has waited (0 when none is due)."""
    query = (
        select(jobs.c.status, func.count())
        .where(jobs.c.status.in_(("queued", "running", "waiting")))
        .group_by(jobs.c.status)
    )
    counts = {str(status): int(count) for status, count in conn.execute(query).all()}
    oldest = conn.execute(
        select(func.min(jobs.c.not_before)).where(
            jobs.c.status == "queued", jobs.c.not_before <= now
        )
    ).scalar()
    if oldest is None:
        return counts, 0.0
    return counts, max(0.0, (now - oldest).total_seconds())


def runs_of(
    conn: Connection,
    schedule_ids: list[str],
    *,
    conversation_ids: list[str] | None,
    per_schedule: int,
) -> dict[str, list[RunRecord]]:
    """The latest runs (deliveries) of each schedule, newest first."""
    found: dict[str, list[RunRecord]] = {}
    for schedule_id in schedule_ids:
        query = (
            select(
                jobs,
                schedule_runs.c.scheduled_for,
                schedule_runs.c.due_at,
                schedule_runs.c.started_at,
                turns.c.quiet,
            )
            .outerjoin(schedule_runs, schedule_runs.c.id == jobs.c.run_id)
            .outerjoin(turns, turns.c.id == jobs.c.turn_id)
            .where(jobs.c.schedule_id == schedule_id)
            .order_by(jobs.c.id.desc())
            .limit(per_schedule)
        )
        if conversation_ids is not None:
            query = query.where(jobs.c.conversation_id.in_(conversation_ids))
        found[schedule_id] = [run(row) for row in conn.execute(query).all()]
    return found


def run(row: Row[Any]) -> RunRecord:
    return RunRecord(
        job_id=int(row.id),
        conversation_id=row.conversation_id,
        status=row.status,
        scheduled_for=row.scheduled_for,
        created_at=row.created_at,
        finished_at=row.finished_at,
        receipt=row.receipt,
        error=row.error,
        attempts=int(row.attempts),
        due_at=row.due_at,
        started_at=row.started_at,
        quiet=bool(row.quiet),
    )


def _job(row: Row[Any]) -> JobRecord:
    return JobRecord(
        id=int(row.id),
        kind=row.kind,
        turn_id=None if row.turn_id is None else int(row.turn_id),
        conversation_id=row.conversation_id,
        schedule_id=row.schedule_id,
        user=row.user_id,
        status=row.status,
        attempts=int(row.attempts),
        run_id=None if row.run_id is None else int(row.run_id),
    )

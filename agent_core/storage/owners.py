"""Work that acts for a person later, and stopping it when they lose access: the
transactions behind ``Store``'s revocation methods."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import and_, func, select, update
from sqlalchemy.engine import Connection

from agent_core.events import utcnow
from agent_core.records import OwnedWork
from agent_core.storage import journal
from agent_core.storage.schema import approvals, conversations, jobs, paired_users, schedules


def revoked_since(conn: Connection, since: datetime | None) -> list[str]:
    """Users revoked after ``since`` (every revoked user when None)."""
    query = select(paired_users.c.user_id).where(paired_users.c.revoked_at.is_not(None))
    if since is not None:
        query = query.where(paired_users.c.revoked_at > since)
    return [str(user) for user in conn.execute(query).scalars()]


def latest_revocation(conn: Connection) -> datetime | None:
    """When anyone was last revoked (None: never)."""
    return conn.execute(select(func.max(paired_users.c.revoked_at))).scalar()


def owned_work(conn: Connection, users: Sequence[str] | None) -> list[OwnedWork]:
    """Pending approvals and active schedules, of ``users`` (everyone's when None)."""
    found: list[OwnedWork] = []
    for kind, table, owner, live in (
        ("approval", approvals, approvals.c.requested_by, approvals.c.status == "pending"),
        ("schedule", schedules, schedules.c.created_by, schedules.c.status == "active"),
    ):
        query = (
            select(
                table.c.id,
                owner.label("user"),
                table.c.conversation_id,
                conversations.c.platform,
                conversations.c.workspace,
                conversations.c.channel,
                conversations.c.thread,
            )
            .join(conversations, conversations.c.id == table.c.conversation_id)
            .where(live)
        )
        if users is not None:
            query = query.where(owner.in_(list(users)))
        for row in conn.execute(query):
            found.append(
                OwnedWork(
                    kind=kind,  # type: ignore[arg-type]
                    id=str(row.id),
                    user=row.user,
                    conversation_id=row.conversation_id,
                    conversation=journal.conversation_key(row),
                )
            )
    return found


def pause_schedule(conn: Connection, work: OwnedWork, *, note: str) -> int | None:
    """Pause an active schedule and add ``note`` to its conversation; the note's id, or
    None when it was not active any more."""
    now = utcnow()
    paused = conn.execute(
        update(schedules)
        .where(schedules.c.id == work.id, schedules.c.status == "active")
        .values(status="paused", updated_at=now)
    ).rowcount
    if not paused:
        return None
    return int(
        conn.execute(
            journal.INSERT_MESSAGE,
            {
                "conversation_id": work.conversation_id,
                "role": "system",
                "text": note,
                "delivery_key": f"schedule:{work.id}:no-access:{now.timestamp():.0f}",
                "created_at": now,
            },
        ).scalar_one()
    )


def refuse_job(conn: Connection, job_id: int, *, owner: str, error: str, note: str) -> int | None:
    """Close a job whose person may no longer talk to the agent, without running it: the
    job and its turn fail with ``error``, its schedule is paused, and ``note`` goes to the
    conversation. The note's id, or None when the job is no longer ours."""
    row = conn.execute(
        select(jobs).where(and_(jobs.c.id == job_id, jobs.c.lease_owner == owner))
    ).first()
    if row is None or row.status != "running":
        return None
    now = utcnow()
    conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id)
        .values(
            status="failed", error=error, finished_at=now, lease_owner=None, lease_expires_at=None
        )
    )
    if row.turn_id is not None:
        journal.finish_turn(conn, int(row.turn_id), status="failed", error=error)
    if row.schedule_id is not None:
        conn.execute(
            update(schedules)
            .where(schedules.c.id == row.schedule_id, schedules.c.status == "active")
            .values(status="paused", updated_at=now)
        )
    return int(
        conn.execute(
            journal.INSERT_MESSAGE,
            {
                "conversation_id": row.conversation_id,
                "role": "system",
                "text": note,
                "turn_id": row.turn_id,
                "delivery_key": f"job:{job_id}:no-access",
                "created_at": now,
            },
        ).scalar_one()
    )

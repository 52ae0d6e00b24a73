"""Every lease at once (conversations, jobs, named locks): who holds one, and giving up
those of a holder known to be dead, so its work need not wait for the expiry."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import select, union, update
from sqlalchemy.engine import Connection

from agent_core.events import utcnow
from agent_core.storage.schema import conversations, jobs, locks

_TABLES = (
    (conversations, conversations.c.lease_owner, conversations.c.lease_expires_at),
    (jobs, jobs.c.lease_owner, jobs.c.lease_expires_at),
    (locks, locks.c.owner, locks.c.expires_at),
)


def holders(conn: Connection) -> list[str]:
    """The owners of every lease that has not expired yet."""
    now = utcnow()
    query = union(
        *(
            select(owner.label("owner")).where(owner.is_not(None), expires > now)
            for _table, owner, expires in _TABLES
        )
    )
    return [str(owner) for owner in conn.execute(query).scalars()]


def expire(conn: Connection, owners: Collection[str]) -> int:
    """Make every lease of ``owners`` expired now (the owner stays recorded, as after any
    expiry); how many there were."""
    if not owners:
        return 0
    now = utcnow()
    count = 0
    for table, owner, expires in _TABLES:
        statement = (
            update(table).where(owner.in_(list(owners)), expires > now).values({expires.key: now})
        )
        count += conn.execute(statement).rowcount
    return count

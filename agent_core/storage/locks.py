"""Named locks with expiry: the transactions behind ``Store``'s lock methods.

A lock is free when it has no row or its row expired. Taking it succeeds for exactly one
process: an UPDATE guarded by the expiry (compare-and-set), or else an INSERT that does
nothing on a conflict; renewing and releasing are guarded by the owner.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import bindparam, delete, or_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from agent_core.events import utcnow
from agent_core.storage.schema import locks

_TAKE = (
    update(locks)
    .where(
        locks.c.name == bindparam("b_name"),
        or_(locks.c.owner == bindparam("b_owner"), locks.c.expires_at < bindparam("b_now")),
    )
    .values(owner=bindparam("b_owner"), expires_at=bindparam("b_until"))
)
_INSERT = {
    "sqlite": sqlite.insert(locks).on_conflict_do_nothing(index_elements=["name"]),
    "postgresql": postgresql.insert(locks).on_conflict_do_nothing(index_elements=["name"]),
}
_RENEW = (
    update(locks)
    .where(locks.c.name == bindparam("b_name"), locks.c.owner == bindparam("b_owner"))
    .values(expires_at=bindparam("b_until"))
)
_RELEASE = delete(locks).where(
    locks.c.name == bindparam("b_name"), locks.c.owner == bindparam("b_owner")
)


def take(conn: Connection, name: str, *, owner: str, ttl: float) -> bool:
    now = utcnow()
    until = now + timedelta(seconds=ttl)
    params = {"b_name": name, "b_owner": owner, "b_now": now, "b_until": until}
    if conn.execute(_TAKE, params).rowcount == 1:
        return True
    row = {"name": name, "owner": owner, "expires_at": until}
    # No row yet: the first INSERT wins; anyone else finds the lock held.
    return conn.execute(_INSERT[conn.dialect.name], row).rowcount == 1


def renew(conn: Connection, name: str, *, owner: str, ttl: float) -> bool:
    params = {"b_name": name, "b_owner": owner, "b_until": utcnow() + timedelta(seconds=ttl)}
    return conn.execute(_RENEW, params).rowcount == 1


def release(conn: Connection, name: str, *, owner: str) -> None:
    conn.execute(_RELEASE, {"b_name": name, "b_owner": owner})

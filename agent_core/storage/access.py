"""Pairing requests, paired users and their audit trail: the transactions behind
``Store``'s access methods."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, insert, select, update
from sqlalchemy.engine import Connection, Row

from agent_core.errors import PairingRefused
from agent_core.events import utcnow
from agent_core.records import PairedUser, PairingOutcome, PairingRequest, PairingStatus
from agent_core.storage import audit
from agent_core.storage.schema import access_events, paired_users, pairing_requests


def is_paired(conn: Connection, user: str) -> bool:
    """True when an admin approved this user and nobody revoked them since."""
    query = select(paired_users.c.user_id).where(
        paired_users.c.user_id == user, paired_users.c.revoked_at.is_(None)
    )
    return conn.execute(query).first() is not None


def _expire(conn: Connection, now: datetime) -> None:
    conn.execute(
        update(pairing_requests)
        .where(pairing_requests.c.status == "pending", pairing_requests.c.expires_at < now)
        .values(status="expired")
    )


def request_code(
    conn: Connection,
    *,
    platform: str,
    user: str,
    conversation_id: str,
    code: str,
    expires_at: datetime,
    max_pending: int,
) -> tuple[PairingOutcome, PairingRequest | None]:
    """A new code, the stranger's code still pending, or nothing (too many pending)."""
    now = utcnow()
    _expire(conn, now)
    pending = and_(pairing_requests.c.status == "pending", pairing_requests.c.user_id == user)
    row = conn.execute(select(pairing_requests).where(pending)).first()
    if row is not None:
        return "pending", _request(row)
    waiting = conn.execute(
        select(func.count())
        .select_from(pairing_requests)
        .where(pairing_requests.c.platform == platform, pairing_requests.c.status == "pending")
    ).scalar_one()
    if waiting >= max_pending:
        return "throttled", None
    values = {
        "code": code,
        "platform": platform,
        "user_id": user,
        "conversation_id": conversation_id,
        "status": "pending",
        "created_at": now,
        "expires_at": expires_at,
    }
    conn.execute(insert(pairing_requests), values)
    return "new", _request(
        conn.execute(select(pairing_requests).where(pairing_requests.c.code == code)).one()
    )


def _decide(
    conn: Connection, code: str, *, status: PairingStatus, actor: str, now: datetime
) -> tuple[str, str]:
    """Close a pending code as ``status``: the normalized code and the code's user; raises
    :class:`PairingRefused` when the code cannot be used."""
    _expire(conn, now)
    normalized = code.strip().upper()
    row = conn.execute(
        select(pairing_requests).where(pairing_requests.c.code == normalized)
    ).first()
    if row is None:
        raise PairingRefused(normalized, "unknown")
    if row.status != "pending":
        raise PairingRefused(normalized, "expired" if row.status == "expired" else "already used")
    conn.execute(
        update(pairing_requests)
        .where(pairing_requests.c.code == normalized)
        .values(status=status, decided_by=actor, decided_at=now)
    )
    return normalized, str(row.user_id)


def _load(conn: Connection, code: str) -> PairingRequest:
    return _request(
        conn.execute(select(pairing_requests).where(pairing_requests.c.code == code)).one()
    )


def approve(conn: Connection, code: str, *, actor: str) -> PairingRequest:
    """Let the code's user in; raises :class:`PairingRefused` when the code cannot be used."""
    now = utcnow()
    normalized, user = _decide(conn, code, status="approved", actor=actor, now=now)
    _admit(conn, user, actor=actor, code=normalized, now=now)
    return _load(conn, normalized)


def refuse(conn: Connection, code: str, *, actor: str) -> PairingRequest:
    """Turn a pending code down (the stranger stays out; a new message asks afresh);
    raises :class:`PairingRefused` when the code is not pending."""
    now = utcnow()
    normalized, user = _decide(conn, code, status="refused", actor=actor, now=now)
    audit.append(
        conn,
        actor=actor,
        action="access.refuse",
        subject=user,
        detail={"code": normalized},
        now=now,
    )
    return _load(conn, normalized)


def _admit(conn: Connection, user: str, *, actor: str, code: str | None, now: datetime) -> None:
    exists = conn.execute(select(paired_users.c.user_id).where(paired_users.c.user_id == user))
    values = {
        "approved_by": actor,
        "approved_at": now,
        "code": code,
        "revoked_by": None,
        "revoked_at": None,
    }
    if exists.first() is None:
        conn.execute(insert(paired_users), {"user_id": user, **values})
    else:
        conn.execute(update(paired_users).where(paired_users.c.user_id == user).values(**values))
    conn.execute(
        insert(access_events),
        {"at": now, "actor": actor, "action": "approve", "user_id": user, "code": code},
    )
    audit.append(
        conn, actor=actor, action="access.let_in", subject=user, detail={"code": code}, now=now
    )


def revoke(conn: Connection, user: str, *, actor: str) -> bool:
    """Shut a paired user out again; False when they were not paired."""
    now = utcnow()
    result = conn.execute(
        update(paired_users)
        .where(paired_users.c.user_id == user, paired_users.c.revoked_at.is_(None))
        .values(revoked_by=actor, revoked_at=now)
    )
    if result.rowcount != 1:
        return False
    conn.execute(
        insert(access_events),
        {"at": now, "actor": actor, "action": "revoke", "user_id": user, "code": None},
    )
    audit.append(conn, actor=actor, action="access.revoke", subject=user, now=now)
    return True


def listing(conn: Connection) -> tuple[list[PairingRequest], list[PairedUser]]:
    """Pending requests (oldest first) and the users let in (newest first)."""
    _expire(conn, utcnow())
    pending = conn.execute(
        select(pairing_requests)
        .where(pairing_requests.c.status == "pending")
        .order_by(pairing_requests.c.created_at)
    ).all()
    paired = conn.execute(
        select(paired_users)
        .where(paired_users.c.revoked_at.is_(None))
        .order_by(paired_users.c.approved_at.desc())
    ).all()
    return [_request(r) for r in pending], [
        PairedUser(user=r.user_id, approved_by=r.approved_by, approved_at=r.approved_at)
        for r in paired
    ]


def _request(row: Row[Any]) -> PairingRequest:
    return PairingRequest(
        code=row.code,
        platform=row.platform,
        user=row.user_id,
        conversation_id=row.conversation_id,
        status=row.status,
        created_at=row.created_at,
        expires_at=row.expires_at,
    )

"""Triggers and their fires: the transactions behind ``Store``'s trigger methods.

A fire is one transaction: the trigger row is read (locked ``FOR UPDATE`` on PostgreSQL,
so two gateways count the same hour), an earlier fire with the same Idempotency-Key is
returned as it is, the hour's fires are counted against the trigger's limit, and the
queued turn, its job and the fire's row are written together. A retried request finds
its first fire; nothing is queued twice.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.engine import Connection, Row

from agent_core.errors import TriggerNotFound, TriggerPaused, TriggerRateLimited
from agent_core.records import Fired, FireRecord, TriggerRecord, TriggerStatus
from agent_core.storage import audit
from agent_core.storage.jobs import insert_job, insert_queued_turn
from agent_core.storage.journal import conversation_key
from agent_core.storage.schema import conversations, jobs, trigger_fires, triggers

_HOUR = timedelta(hours=1)
_TRIGGER = select(triggers, conversations.c.platform, conversations.c.workspace,
                  conversations.c.channel, conversations.c.thread).join(
    conversations, conversations.c.id == triggers.c.conversation_id
)  # fmt: skip
_FIRES = select(trigger_fires, jobs.c.status, jobs.c.receipt, jobs.c.error).join(
    jobs, jobs.c.id == trigger_fires.c.job_id
)


def new_trigger_id() -> str:
    """Short enough to type: ``tr_`` and 10 hex digits (40 random bits; the id is no secret)."""
    return f"tr_{secrets.token_hex(5)}"


def new_secret() -> str:
    """256 random bits, URL-safe (a bearer token, or the key of the body's HMAC)."""
    return secrets.token_urlsafe(32)


def create(
    conn: Connection,
    *,
    conversation_id: str,
    prompt: str,
    per_hour: int,
    created_by: str,
    now: datetime,
) -> tuple[TriggerRecord, str]:
    """A new trigger and its secret (shown once, to whoever created it)."""
    trigger_id, secret = new_trigger_id(), new_secret()
    conn.execute(
        insert(triggers),
        {"id": trigger_id, "conversation_id": conversation_id, "prompt": prompt,
         "secret": secret, "per_hour": per_hour, "status": "active", "created_by": created_by,
         "created_at": now, "updated_at": now},
    )  # fmt: skip
    audit.append(
        conn, actor=created_by, action="trigger.create", subject=trigger_id,
        conversation_id=conversation_id, detail={"per_hour": per_hour}, now=now,
    )  # fmt: skip
    found = load(conn, trigger_id)
    assert found is not None
    return found[0], secret


def load(conn: Connection, trigger_id: str) -> tuple[TriggerRecord, str] | None:
    """A trigger that is not deleted, and its secret."""
    row = conn.execute(
        _TRIGGER.where(triggers.c.id == trigger_id, triggers.c.status != "deleted")
    ).first()
    return None if row is None else (_record(row), row.secret)


def listing(
    conn: Connection, conversation_ids: list[str] | None, *, fires: int
) -> list[TriggerRecord]:
    """The triggers that are not deleted (of these conversations; None: all), oldest
    first, each with its latest ``fires``."""
    query = _TRIGGER.where(triggers.c.status != "deleted").order_by(triggers.c.created_at)
    if conversation_ids is not None:
        query = query.where(triggers.c.conversation_id.in_(conversation_ids))
    found = [_record(row) for row in conn.execute(query).all()]
    if not fires:
        return found
    return [dataclasses.replace(t, fires=tuple(fires_of(conn, t.id, limit=fires))) for t in found]


def set_status(
    conn: Connection,
    trigger_id: str,
    *,
    status: TriggerStatus,
    allowed_from: tuple[TriggerStatus, ...],
    actor: str,
    now: datetime,
) -> TriggerRecord | None:
    """Pause, resume or delete (compare-and-set); None when the status did not allow it.
    A deleted trigger keeps its row for its fires' receipts; its secret is blanked, and
    its turns not yet started are refused when their job comes (it no longer exists)."""
    values: dict[str, Any] = {"status": status, "updated_at": now}
    if status == "deleted":
        values["secret"] = ""
    changed = conn.execute(
        update(triggers)
        .where(triggers.c.id == trigger_id, triggers.c.status.in_(allowed_from))
        .values(**values)
    ).rowcount
    if not changed:
        return None
    row = conn.execute(_TRIGGER.where(triggers.c.id == trigger_id)).one()
    verb = {"active": "resume", "paused": "pause", "deleted": "delete"}[status]
    audit.append(
        conn, actor=actor, action=f"trigger.{verb}", subject=trigger_id,
        conversation_id=row.conversation_id, now=now,
    )  # fmt: skip
    return _record(row)


def fire(
    conn: Connection,
    trigger_id: str,
    *,
    key: str | None,
    source: str,
    size: int,
    prompt: Callable[[TriggerRecord], str],
    user: str,
    now: datetime,
) -> Fired:
    """Queue the trigger's turn (``prompt`` writes its text), or find the fire made
    before with the same ``key``. Raises ``TriggerNotFound``, ``TriggerPaused`` or
    ``TriggerRateLimited`` (with the seconds until a fire is accepted again)."""
    row = conn.execute(
        _TRIGGER.where(triggers.c.id == trigger_id, triggers.c.status != "deleted")
        .with_for_update(of=triggers)
    ).first()  # fmt: skip
    if row is None:
        raise TriggerNotFound(trigger_id)
    if key is not None:
        earlier = conn.execute(
            _FIRES.where(
                trigger_fires.c.trigger_id == trigger_id,
                trigger_fires.c.idempotency_key == key,
            )
        ).first()
        if earlier is not None:
            return Fired(fire=_fire(earlier), duplicate=True)
    if row.status == "paused":
        raise TriggerPaused(trigger_id)
    since = now - _HOUR
    recent = conn.execute(
        select(func.count(), func.min(trigger_fires.c.received_at)).where(
            trigger_fires.c.trigger_id == trigger_id, trigger_fires.c.received_at > since
        )
    ).one()
    if recent[0] >= row.per_hour:
        oldest: datetime = recent[1]
        wait = max(1.0, (oldest + _HOUR - now).total_seconds())
        raise TriggerRateLimited(trigger_id, retry_after=wait)
    trigger = _record(row)
    turn_id = insert_queued_turn(
        conn, conversation_id=row.conversation_id, user=user, prompt=prompt(trigger),
        reply_to=None, now=now,
    )  # fmt: skip
    job_id = insert_job(conn, turn_id=turn_id, conversation_id=row.conversation_id, now=now)
    fire_id = conn.execute(
        insert(trigger_fires).returning(trigger_fires.c.id),
        {"trigger_id": trigger_id, "idempotency_key": key, "source": source, "bytes": size,
         "turn_id": turn_id, "job_id": job_id, "received_at": now},
    ).scalar_one()  # fmt: skip
    made = conn.execute(_FIRES.where(trigger_fires.c.id == fire_id)).one()
    return Fired(fire=_fire(made), duplicate=False)


def fires_of(conn: Connection, trigger_id: str, *, limit: int) -> list[FireRecord]:
    """A trigger's latest fires, newest first, with what became of each turn."""
    rows = conn.execute(
        _FIRES.where(trigger_fires.c.trigger_id == trigger_id)
        .order_by(trigger_fires.c.id.desc())
        .limit(limit)
    ).all()
    return [_fire(row) for row in rows]


def one_fire(conn: Connection, trigger_id: str, fire_id: int) -> FireRecord | None:
    """One fire of this trigger (its receipt), or None."""
    row = conn.execute(
        _FIRES.where(trigger_fires.c.trigger_id == trigger_id, trigger_fires.c.id == fire_id)
    ).first()
    return None if row is None else _fire(row)


def exists(conn: Connection, trigger_id: str) -> bool:
    """Whether the trigger is there (active or paused): its queued turns may run."""
    found = conn.execute(
        select(triggers.c.id).where(triggers.c.id == trigger_id, triggers.c.status != "deleted")
    ).first()
    return found is not None


def _record(row: Row[Any]) -> TriggerRecord:
    return TriggerRecord(
        id=row.id,
        conversation_id=row.conversation_id,
        conversation=conversation_key(row),
        prompt=row.prompt,
        per_hour=int(row.per_hour),
        status=row.status,
        created_by=row.created_by,
        created_at=row.created_at,
    )


def _fire(row: Row[Any]) -> FireRecord:
    return FireRecord(
        id=int(row.id),
        trigger_id=row.trigger_id,
        source=row.source,
        bytes=int(row.bytes),
        received_at=row.received_at,
        job_id=int(row.job_id),
        turn_id=int(row.turn_id),
        status=row.status,
        receipt=row.receipt,
        error=row.error,
        idempotency_key=row.idempotency_key,
    )

"""The audit log: one row per thing someone did or chatgate did for them, appended in the
transaction that did it (so the log never says something happened that did not, or misses
something that did). Rows hold who, what, on whom or what, and names, ids and counts;
never message text, so erasing a person leaves the log whole."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import JsonValue
from sqlalchemy import String, cast, delete, insert, or_, select
from sqlalchemy.engine import Connection

from agent_core.events import utcnow
from agent_core.storage.schema import audit_log, turn_steps, turns
from agent_core.stores.operations import AuditEntry

_INSERT = insert(audit_log)


def append(
    conn: Connection,
    *,
    actor: str,
    action: str,
    subject: str | None = None,
    conversation_id: str | None = None,
    turn_id: int | None = None,
    detail: JsonValue = None,
    now: datetime | None = None,
) -> None:
    """Add one entry (in the caller's transaction)."""
    conn.execute(
        _INSERT,
        {
            "at": now or utcnow(),
            "actor": actor[:255],
            "action": action,
            "subject": subject[:255] if subject else subject,
            "conversation_id": conversation_id,
            "turn_id": turn_id,
            "detail": detail,
        },
    )


def tool_ran(conn: Connection, turn_id: int, seq: int, status: str, *, now: datetime) -> None:
    """A tool call's outcome was journaled: who asked (the turn's person), which tool, how
    it ended. Its arguments and result stay in the journal, where erasure reaches them."""
    row = conn.execute(
        select(turns.c.user_id, turns.c.conversation_id, turn_steps.c.input, turn_steps.c.output)
        .join(turn_steps, turn_steps.c.turn_id == turns.c.id)
        .where(turns.c.id == turn_id, turn_steps.c.seq == seq)
    ).first()
    if row is None:
        return
    given = row.input if isinstance(row.input, dict) else {}
    said = row.output if isinstance(row.output, dict) else {}
    append(
        conn,
        actor=row.user_id,
        action="tool.call",
        subject=str(given.get("name") or said.get("tool") or "?"),
        conversation_id=row.conversation_id,
        turn_id=turn_id,
        detail={"seq": seq, "status": status},
        now=now,
    )


def _matching(query: str | None, actor: str | None, action: str | None) -> Any:
    statement = select(audit_log)
    if actor:
        statement = statement.where(audit_log.c.actor == actor)
    if action and action.endswith("."):  # a family: "approval." is every decision
        statement = statement.where(audit_log.c.action.startswith(action, autoescape=True))
    elif action:  # one action, through its index (start-up reads the last config.start)
        statement = statement.where(audit_log.c.action == action)
    if query:
        needle = f"%{_escape(query.lower())}%"
        statement = statement.where(
            or_(
                audit_log.c.actor.ilike(needle, escape="\\"),
                audit_log.c.action.ilike(needle, escape="\\"),
                audit_log.c.subject.ilike(needle, escape="\\"),
                audit_log.c.conversation_id.ilike(needle, escape="\\"),
                cast(audit_log.c.detail, String).ilike(needle, escape="\\"),
            )
        )
    return statement


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def page(
    conn: Connection,
    *,
    query: str | None = None,
    actor: str | None = None,
    action: str | None = None,
    before: int | None = None,
    limit: int = 100,
) -> list[AuditEntry]:
    """Newest first, ``limit`` at a time; ``before`` an entry id for the next page."""
    statement = _matching(query, actor, action)
    if before is not None:
        statement = statement.where(audit_log.c.id < before)
    rows = conn.execute(statement.order_by(audit_log.c.id.desc()).limit(limit))
    return [_entry(row) for row in rows]


def chunk(
    conn: Connection, *, query: str | None = None, after: int = 0, batch: int = 1000
) -> list[AuditEntry]:
    """Matching entries after the entry id ``after``, oldest first: the export reads the
    whole log this way, ``batch`` at a time."""
    statement = _matching(query, None, None).where(audit_log.c.id > after)
    return [_entry(row) for row in conn.execute(statement.order_by(audit_log.c.id).limit(batch))]


def prune(conn: Connection, *, before: datetime) -> int:
    """Remove entries older than ``before`` (the audit retention); how many went."""
    return int(conn.execute(delete(audit_log).where(audit_log.c.at < before)).rowcount or 0)


def _entry(row: Any) -> AuditEntry:
    return AuditEntry(
        id=int(row.id),
        at=row.at,
        actor=row.actor,
        action=row.action,
        subject=row.subject,
        conversation_id=row.conversation_id,
        turn_id=row.turn_id,
        detail=row.detail,
    )

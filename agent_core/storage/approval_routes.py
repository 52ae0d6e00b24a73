"""Where approval prompts are shown: the copies sent to approvers' DMs (a decision edits
each), and passing a prompt on to ``escalate_to`` when its time is up."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection

from agent_core.events import ConversationKey, utcnow
from agent_core.records import ApprovalRecord
from agent_core.storage import approvals as approval_sql
from agent_core.storage.schema import approval_copies, approvals


def add_copy(
    conn: Connection, approval_id: str, where: ConversationKey, *, message_id: str, sent_to: str
) -> None:
    """Record a copy of the prompt (its receipt), once per approval and chat."""
    found = conn.execute(
        select(approval_copies.c.approval_id).where(
            approval_copies.c.approval_id == approval_id,
            approval_copies.c.platform == where.platform,
            approval_copies.c.workspace == where.workspace,
            approval_copies.c.channel == where.channel,
        )
    ).first()
    if found is None:
        conn.execute(
            insert(approval_copies),
            {
                "approval_id": approval_id,
                "platform": where.platform,
                "workspace": where.workspace,
                "channel": where.channel,
                "message_id": message_id,
                "sent_to": sent_to,
                "created_at": utcnow(),
            },
        )


def copies(conn: Connection, approval_id: str) -> list[tuple[ConversationKey, str]]:
    """Each copy of the prompt: where, and its message."""
    rows = conn.execute(
        select(approval_copies).where(approval_copies.c.approval_id == approval_id)
    ).all()
    return [
        (
            ConversationKey(
                platform=row.platform, workspace=row.workspace, channel=row.channel, thread=None
            ),
            str(row.message_id),
        )
        for row in rows
        if row.message_id
    ]


def escalate(conn: Connection, approval_id: str, *, until: datetime) -> ApprovalRecord | None:
    """Pass a pending approval on: its ``escalate_to`` join its approvers, it waits until
    ``until``, and it is passed on only once. None when it is decided, or has no one to
    pass it on to."""
    row = conn.execute(
        select(approvals.c.approvers, approvals.c.escalate_to)
        .where(approvals.c.id == approval_id, approvals.c.status == "pending")
        .with_for_update()
    ).first()
    if row is None or not row.escalate_to:
        return None
    approvers = list(row.approvers or [])
    approvers += [person for person in row.escalate_to if person not in approvers]
    conn.execute(
        update(approvals)
        .where(approvals.c.id == approval_id)
        .values(approvers=approvers, escalate_to=None, expires_at=until)
    )
    return approval_sql.load(conn, approval_id)

"""Questions (``ask_user``) in the database: who pressed "Other", and the message that
answers it, taken in the ledger's transaction so the answer and the message it came in are
stored together or not at all."""

from __future__ import annotations

from sqlalchemy import bindparam, or_, select, update
from sqlalchemy.engine import Connection

from agent_core.records import ApprovalRecord
from agent_core.storage import approvals as approval_sql
from agent_core.storage.schema import approvals

# Asked for every message the ledger takes: built once (building it costs more than
# running it on an empty table).
_ANSWERING = (
    select(approvals.c.id)
    .where(
        approvals.c.conversation_id == bindparam("b_conversation"),
        approvals.c.status == "pending",
        approvals.c.kind == "question",
        approvals.c.answering == bindparam("b_user"),
    )
    .order_by(approvals.c.created_at)
    .limit(1)
)


def mark_answering(conn: Connection, approval_id: str, user: str) -> ApprovalRecord | None:
    """``user`` pressed "Other": their next message answers the question. None when the
    question is over, or someone else pressed "Other" first."""
    changed = conn.execute(
        update(approvals)
        .where(
            approvals.c.id == approval_id,
            approvals.c.status == "pending",
            approvals.c.kind == "question",
            or_(approvals.c.answering.is_(None), approvals.c.answering == user),
        )
        .values(answering=user)
    ).rowcount
    return approval_sql.load(conn, approval_id) if changed == 1 else None


def typed_answer(
    conn: Connection, conversation_id: str, user: str, text: str
) -> ApprovalRecord | None:
    """Answer the question ``user`` pressed "Other" on in this conversation with ``text``
    (the oldest, if several wait); None when none waits for them."""
    waiting = conn.execute(_ANSWERING, {"b_conversation": conversation_id, "b_user": user}).scalar()
    if waiting is None:
        return None
    return approval_sql.decide(
        conn,
        str(waiting),
        status="answered",
        user=user,
        note=f"{user} answered: {text}",
        answer=text,
    )

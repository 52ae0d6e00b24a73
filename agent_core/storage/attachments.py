"""The files that came with messages: their rows, made with the message (the transaction
behind ``Store.accept_inbound``), read for a turn, and marked stored or refused once the
turn fetched them (``agent_core.files``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import bindparam, insert, or_, select, update
from sqlalchemy.engine import Connection, Row

from agent_core.events import Attachment
from agent_core.journaled import Spend
from agent_core.records import AttachmentRecord
from agent_core.storage import usage
from agent_core.storage.schema import attachments, turns

_INSERT = insert(attachments)
# A turn's files: its own message's, and those of the messages it took in (busy modes).
_FOR_TURN = (
    select(attachments)
    .where(
        or_(
            attachments.c.turn_id == bindparam("b_turn"),
            attachments.c.turn_id.in_(
                select(turns.c.id).where(turns.c.merged_into == bindparam("b_turn"))
            ),
        )
    )
    .order_by(attachments.c.message_id, attachments.c.position)
)
_STORED = (
    update(attachments)
    .where(attachments.c.id == bindparam("b_id"))
    .values(
        status="stored",
        sha256=bindparam("b_sha256"),
        content_type=bindparam("b_type"),
        size=bindparam("b_size"),
        error=None,
        stored_at=bindparam("b_at"),
    )
)
_REFUSED = (
    update(attachments)
    .where(attachments.c.id == bindparam("b_id"))
    .values(status="refused", error=bindparam("b_error"))
)
_TRANSCRIBED = (
    update(attachments)
    .where(attachments.c.id == bindparam("b_id"))
    .values(transcript=bindparam("b_transcript"))
)
_HASHES_IN_USE = select(attachments.c.sha256).where(
    attachments.c.sha256.is_not(None), attachments.c.stored_at >= bindparam("b_since")
)


def add(
    conn: Connection,
    files: Sequence[Attachment],
    *,
    message_id: int,
    conversation_id: str,
    turn_id: int | None,
) -> None:
    """The rows of a message's files, all pending."""
    if not files:
        return
    conn.execute(
        _INSERT,
        [
            {
                "message_id": message_id,
                "conversation_id": conversation_id,
                "turn_id": turn_id,
                "position": position,
                "name": (file.name or "file")[:255],
                "declared_type": (file.mime_type or None) and file.mime_type[:255],
                "declared_size": file.size,
                "url": file.url,
                "platform_file_id": file.platform_file_id,
                "status": "pending",
            }
            for position, file in enumerate(files)
        ],
    )


def names(conn: Connection, message_ids: Sequence[int]) -> dict[int, tuple[str, ...]]:
    """The names of these messages' files, by message."""
    if not message_ids:
        return {}
    query = (
        select(attachments.c.message_id, attachments.c.name)
        .where(attachments.c.message_id.in_(message_ids))
        .order_by(attachments.c.message_id, attachments.c.position)
    )
    found: dict[int, list[str]] = {}
    for message_id, name in conn.execute(query):
        found.setdefault(int(message_id), []).append(str(name))
    return {message_id: tuple(files) for message_id, files in found.items()}


def for_turn(conn: Connection, turn_id: int) -> list[AttachmentRecord]:
    """The files a turn answers, in the order they came."""
    return [_record(row) for row in conn.execute(_FOR_TURN, {"b_turn": turn_id})]


def stored(
    conn: Connection, attachment_id: int, *, sha256: str, content_type: str, size: int, at: datetime
) -> None:
    conn.execute(
        _STORED,
        {
            "b_id": attachment_id,
            "b_sha256": sha256,
            "b_type": content_type,
            "b_size": size,
            "b_at": at,
        },
    )


def transcribed(
    conn: Connection,
    attachment_id: int,
    *,
    turn_id: int,
    transcript: str,
    spend: Spend,
    now: datetime,
) -> None:
    """The audio's transcript, and what hearing it cost (counted with the turn's usage)."""
    conn.execute(_TRANSCRIBED, {"b_id": attachment_id, "b_transcript": transcript})
    usage.record(conn, turn_id, spend, now=now)


def refused(conn: Connection, attachment_id: int, error: str) -> None:
    conn.execute(_REFUSED, {"b_id": attachment_id, "b_error": error})


def hashes_in_use(conn: Connection, since: datetime) -> set[str]:
    """The content hashes of files stored since ``since`` (the ones retention keeps)."""
    return {str(h) for h in conn.execute(_HASHES_IN_USE, {"b_since": since}).scalars()}


def _record(row: Row[tuple[object, ...]]) -> AttachmentRecord:
    m = row._mapping
    return AttachmentRecord(
        id=int(m["id"]),
        message_id=int(m["message_id"]),
        conversation_id=str(m["conversation_id"]),
        turn_id=m["turn_id"],
        position=int(m["position"]),
        name=str(m["name"]),
        declared_type=m["declared_type"],
        declared_size=m["declared_size"],
        url=m["url"],
        platform_file_id=m["platform_file_id"],
        status=m["status"],
        sha256=m["sha256"],
        content_type=m["content_type"],
        size=m["size"],
        error=m["error"],
        transcript=m["transcript"],
    )

"""Hearing marks: until when a platform's receiving session heard everything (the
transactions behind ``Store.heard_until`` and ``Store.hear_until``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from agent_core.storage.schema import hearing_marks

_UPSERT: dict[str, sqlite.Insert | postgresql.Insert] = {
    "sqlite": sqlite.insert(hearing_marks),
    "postgresql": postgresql.insert(hearing_marks),
}


def heard_until(conn: Connection, platform: str) -> datetime | None:
    query = select(hearing_marks.c.heard_until).where(hearing_marks.c.platform == platform)
    found: datetime | None = conn.execute(query).scalar()
    return found


def hear_until(conn: Connection, platform: str, at: datetime) -> None:
    insert = _UPSERT[conn.dialect.name].values(platform=platform, heard_until=at)
    conn.execute(
        insert.on_conflict_do_update(index_elements=["platform"], set_={"heard_until": at})
    )

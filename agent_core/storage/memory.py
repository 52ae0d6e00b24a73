"""Memories: the transactions behind ``Store``'s memory methods.

Recall is full-text search, per backend: SQLite's FTS5 (``bm25``) or PostgreSQL's
``tsvector`` (``ts_rank``), then blended with recency in Python, so a fact from last week
outranks an equally relevant one from last year. Only live facts are found: not forgotten,
not superseded, and either the person's own (``scope = user``) or this conversation's.
"""

from __future__ import annotations

import math
import re
from datetime import datetime

from sqlalchemy import bindparam, insert, select, text, true, update
from sqlalchemy.engine import Connection

from agent_core.records import MemoryRecord, MemoryScope
from agent_core.storage.columns import UTCDateTime
from agent_core.storage.schema import memories, messages

WORDS = re.compile(r"\w+", re.UNICODE)
# Half the weight at this age: recent facts come first among equally relevant ones.
_HALF_LIFE_DAYS = 30.0
_CANDIDATES = 50
# A person's facts are theirs wherever they were made; a conversation's are its own.
_VISIBLE = (
    "m.forgotten_at IS NULL AND m.superseded_by IS NULL AND "
    "((m.scope = 'user' AND m.user_id = :user) "
    "OR (m.scope = 'conversation' AND m.conversation_id = :conversation))"
)
_SEARCH = {
    "sqlite": text(
        "SELECT m.id, m.scope, m.about, m.fact, m.source, m.created_at, "
        "-bm25(memories_fts) AS relevance "
        "FROM memories_fts JOIN memories AS m ON m.id = memories_fts.rowid "
        f"WHERE memories_fts MATCH :query AND {_VISIBLE} "
        "ORDER BY bm25(memories_fts) LIMIT :limit"
    ),
    "postgresql": text(
        "SELECT m.id, m.scope, m.about, m.fact, m.source, m.created_at, "
        "ts_rank(m.memories_fts, to_tsquery('simple', :query)) AS relevance "
        "FROM memories AS m "
        f"WHERE m.memories_fts @@ to_tsquery('simple', :query) AND {_VISIBLE} "
        "ORDER BY relevance DESC LIMIT :limit"
    ),
}
_TYPES = {"created_at": UTCDateTime()}
# The same person's live fact about the same thing, in the same scope (a conversation's
# fact only in that conversation).
_SUPERSEDE = (
    update(memories)
    .where(
        memories.c.user_id == bindparam("b_user"),
        memories.c.about == bindparam("b_about"),
        memories.c.scope == bindparam("b_scope"),
        (memories.c.scope == "user") | (memories.c.conversation_id == bindparam("b_conv")),
        memories.c.id != bindparam("b_id"),
        memories.c.superseded_by.is_(None),
        memories.c.forgotten_at.is_(None),
    )
    .values(superseded_by=bindparam("b_id"))
)


def match_query(words: list[str], dialect: str) -> str:
    """Any of the words, as the backend's query syntax (each word quoted or escaped)."""
    if dialect == "sqlite":
        return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
    return " | ".join(w.replace("'", "") for w in words if w.replace("'", ""))


def remember(
    conn: Connection,
    *,
    user: str,
    conversation_id: str,
    scope: MemoryScope,
    fact: str,
    about: str | None,
    source: str,
    now: datetime,
    turn_id: int | None = None,
) -> tuple[int, int]:
    """Store a fact; a live fact of the same person about the same thing is superseded.
    Returns (the new fact's id, how many it superseded). A fact drawn from turn
    ``turn_id`` after the message that opened it was deleted is stored forgotten: the
    delete took that turn's facts, and one written after it must not outlive it."""
    gone = (
        turn_id is not None
        and conn.execute(
            select(messages.c.id)
            .where(
                messages.c.turn_id == turn_id,
                messages.c.role == "user",
                messages.c.deleted_at.is_not(None),
            )
            .limit(1)
        ).first()
        is not None
    )
    if gone:
        row_id = conn.execute(
            insert(memories).returning(memories.c.id),
            {"user_id": user, "conversation_id": conversation_id, "scope": scope,
             "about": about, "fact": fact, "source": source, "created_at": now,
             "forgotten_at": now},
        ).scalar_one()  # fmt: skip
        return int(row_id), 0
    row = {
        "user_id": user,
        "conversation_id": conversation_id,
        "scope": scope,
        "about": about,
        "fact": fact,
        "source": source,
        "created_at": now,
    }
    memory_id = int(conn.execute(insert(memories).returning(memories.c.id), row).scalar_one())
    superseded = 0
    if about:
        params = {
            "b_user": user,
            "b_about": about,
            "b_id": memory_id,
            "b_scope": scope,
            "b_conv": conversation_id,
        }
        superseded = conn.execute(_SUPERSEDE, params).rowcount
    return memory_id, superseded


def recall(
    conn: Connection,
    *,
    user: str,
    conversation_id: str,
    query: str,
    now: datetime,
    limit: int,
) -> list[MemoryRecord]:
    """The live facts this person may see that match ``query``, best first."""
    words = WORDS.findall(query.lower())[:32]
    if not words:
        return []
    statement = _SEARCH[conn.dialect.name].columns(**_TYPES)
    rows = conn.execute(
        statement,
        {
            "query": match_query(words, conn.dialect.name),
            "user": user,
            "conversation": conversation_id,
            "limit": _CANDIDATES,
        },
    ).all()

    def score(row: object) -> float:
        age_days = max(0.0, (now - row.created_at).total_seconds() / 86400)  # type: ignore[attr-defined]
        return float(row.relevance) * math.pow(0.5, age_days / _HALF_LIFE_DAYS)  # type: ignore[attr-defined]

    ranked = sorted(rows, key=score, reverse=True)[:limit]
    return [
        MemoryRecord(
            id=int(r.id),
            scope=r.scope,
            about=r.about,
            fact=r.fact,
            source=r.source,
            created_at=r.created_at,
        )
        for r in ranked
    ]


def forget(
    conn: Connection,
    *,
    user: str,
    conversation_id: str,
    memory_id: int,
    admin: bool,
    now: datetime,
) -> bool:
    """Forget one fact; False when there is no such live fact this person may forget: their
    own personal fact (anywhere), or a fact of this conversation that they made (an admin:
    any fact of this conversation)."""
    own = memories.c.user_id == user
    here = (memories.c.scope == "conversation") & (memories.c.conversation_id == conversation_id)
    query = (
        update(memories)
        .where(
            memories.c.id == memory_id,
            memories.c.forgotten_at.is_(None),
            ((memories.c.scope == "user") & own) | (here & (true() if admin else own)),
        )
        .values(forgotten_at=now)
    )
    return conn.execute(query).rowcount == 1

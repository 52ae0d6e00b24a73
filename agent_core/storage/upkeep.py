"""Memory upkeep: the transactions behind fact extraction and the nightly maintenance.

Extraction is a job created in the transaction that journals a turn's reply, so a crash
after the reply loses no extraction; its facts are stored once per turn (a job that runs
again finds them by their source and stores nothing). Maintenance is planned by whichever
dispatcher first moves the ``memory`` slot forward (one compare-and-set, safe from any
number of beats at once): one job per person with facts not yet reviewed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import and_, exists, insert, select, text, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from agent_core.events import utcnow
from agent_core.journaled import Spend
from agent_core.records import FinishedStep, MemoryRecord, Role, TurnRecord
from agent_core.storage import journal
from agent_core.storage.columns import UTCDateTime
from agent_core.storage.memory import WORDS, match_query, remember
from agent_core.storage.schema import jobs, maintenance, memories, model_usage
from agent_core.storage.usage import day_of
from agent_core.storage.usage import record as record_turn_spend

MEMORY_SLOT = "memory"
_LIVE = and_(memories.c.superseded_by.is_(None), memories.c.forgotten_at.is_(None))
_COLUMNS = (
    memories.c.id,
    memories.c.scope,
    memories.c.about,
    memories.c.fact,
    memories.c.source,
    memories.c.created_at,
)
# Older live facts of the person, in the new fact's scope: a person's own facts are compared
# with their own, a conversation's with that conversation's.
_OLDER_LIVE = (
    "m.user_id = :user AND m.id < :newer AND m.forgotten_at IS NULL AND m.superseded_by IS NULL"
    " AND m.scope = (SELECT n.scope FROM memories AS n WHERE n.id = :newer)"
    " AND (m.scope = 'user' OR m.conversation_id ="
    " (SELECT n.conversation_id FROM memories AS n WHERE n.id = :newer))"
)
_SIMILAR = {
    "sqlite": text(
        "SELECT m.id, m.scope, m.about, m.fact, m.source, m.created_at "
        "FROM memories_fts JOIN memories AS m ON m.id = memories_fts.rowid "
        f"WHERE memories_fts MATCH :query AND {_OLDER_LIVE} "
        "ORDER BY bm25(memories_fts) LIMIT :limit"
    ),
    "postgresql": text(
        "SELECT m.id, m.scope, m.about, m.fact, m.source, m.created_at "
        "FROM memories AS m "
        f"WHERE m.memories_fts @@ to_tsquery('simple', :query) AND {_OLDER_LIVE} "
        "ORDER BY ts_rank(m.memories_fts, to_tsquery('simple', :query)) DESC LIMIT :limit"
    ),
}


def _insert_job(
    conn: Connection,
    *,
    kind: str,
    now: datetime,
    user: str,
    turn_id: int | None = None,
    conversation_id: str | None = None,
) -> int:
    row = {
        "kind": kind,
        "turn_id": turn_id,
        "conversation_id": conversation_id,
        "user_id": user,
        "status": "queued",
        "attempts": 0,
        "not_before": now,
        "created_at": now,
    }
    return int(conn.execute(insert(jobs).returning(jobs.c.id), row).scalar_one())


def reply_intent(
    conn: Connection,
    turn: TurnRecord,
    seq: int,
    *,
    role: Role,
    text: str,
    delivery_key: str,
    answered: FinishedStep | None,
    extract: bool,
) -> int:
    """``journal.reply_intent``, plus the turn's extraction job when ``extract``."""
    message_id = journal.reply_intent(
        conn, turn, seq, role=role, text=text, delivery_key=delivery_key, answered=answered
    )
    if extract:
        _insert_job(
            conn,
            kind="extract",
            now=utcnow(),
            user=turn.user,
            turn_id=turn.id,
            conversation_id=turn.conversation_id,
        )
    return message_id


def quiet_answer(
    conn: Connection,
    turn: TurnRecord,
    seq: int,
    *,
    report: str,
    answered: FinishedStep | None,
) -> None:
    """A quiet run's answer its model marked not worth posting, in one transaction: the
    model call it came from, a reply step that posted nothing (its input keeps the
    model's one-line reason), and the turn done. Nothing enters the history."""
    if answered is not None:
        journal.finish_step(
            conn, turn.id, answered.seq, kind=answered.kind, status=answered.status,
            output=answered.output,
        )  # fmt: skip
    journal.begin_step(
        conn, turn.id, seq, kind="reply", input={"role": "assistant", "text": report,
                                                 "posted": False},
    )  # fmt: skip
    journal.finish_step(conn, turn.id, seq, kind="reply", status="done", output={"posted": False})
    journal.finish_turn(conn, turn.id, status="done", error=None)


def finish_extraction(
    conn: Connection,
    job_id: int,
    *,
    owner: str,
    turn_id: int,
    facts: Sequence[tuple[str, str | None]],
    spend: Spend,
    now: datetime,
) -> int | None:
    """Close an ``extract`` job with what it found, in one transaction: the facts (as the
    turn's person's, superseding older ones about the same thing) and the model call's
    spend. None, storing nothing, when the job is no longer this owner's (its lease passed
    to another runner, or it is closed already): so a turn's facts are stored once."""
    closed = conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id, jobs.c.status == "running", jobs.c.lease_owner == owner)
        .values(status="done", finished_at=now, lease_owner=None, lease_expires_at=None)
        .returning(jobs.c.user_id, jobs.c.conversation_id)
    ).first()
    if closed is None:
        return None
    record_turn_spend(conn, turn_id, spend, now=now)
    for fact, about in facts:
        remember(
            conn,
            user=closed.user_id,
            conversation_id=closed.conversation_id,
            scope="user",
            fact=fact,
            about=about,
            source=f"extracted from turn {turn_id} on {day_of(now)}",
            now=now,
            turn_id=turn_id,
        )
    return len(facts)


def plan_maintenance(conn: Connection, *, slot: datetime, now: datetime) -> list[int]:
    """Claim the maintenance slot ``slot`` and create its jobs: one per person with live
    facts not yet reviewed. Empty when the slot was claimed already (by anyone) or when
    this is the first slot ever seen (counting starts now, not with a burst of old slots).
    """
    moved = conn.execute(
        update(maintenance)
        .where(maintenance.c.name == MEMORY_SLOT, maintenance.c.last_slot < slot)
        .values(last_slot=slot)
    ).rowcount
    if not moved:
        seen = conn.execute(
            select(maintenance.c.last_slot).where(maintenance.c.name == MEMORY_SLOT)
        ).first()
        if seen is None:
            dialect_insert = (
                postgresql_insert if conn.dialect.name == "postgresql" else sqlite_insert
            )
            first = dialect_insert(maintenance).values(name=MEMORY_SLOT, last_slot=slot)
            conn.execute(first.on_conflict_do_nothing())
        return []
    unfinished = exists().where(
        jobs.c.kind == "maintain",
        jobs.c.user_id == memories.c.user_id,
        jobs.c.status.in_(("queued", "running", "waiting")),
    )
    users = conn.execute(
        select(memories.c.user_id)
        .distinct()
        .where(_LIVE, memories.c.reviewed_at.is_(None), ~unfinished)
        .order_by(memories.c.user_id)
    ).scalars()
    return [_insert_job(conn, kind="maintain", now=now, user=str(user)) for user in users]


def unreviewed(conn: Connection, user: str, *, after: int, limit: int) -> list[MemoryRecord]:
    """A person's live facts that maintenance has not looked at yet, oldest first, from
    the one after ``after`` (an id)."""
    rows = conn.execute(
        select(*_COLUMNS)
        .where(
            memories.c.user_id == user,
            memories.c.id > after,
            _LIVE,
            memories.c.reviewed_at.is_(None),
        )
        .order_by(memories.c.id)
        .limit(limit)
    ).all()
    return [_record(row) for row in rows]


def similar_older(
    conn: Connection, user: str, newer: MemoryRecord, *, limit: int
) -> list[MemoryRecord]:
    """The person's live facts older than ``newer`` that share words with it, best first."""
    words = WORDS.findall(newer.fact.lower())[:32]
    if newer.about:
        words += WORDS.findall(newer.about.lower())[:8]
    if not words:
        return []
    statement = _SIMILAR[conn.dialect.name].columns(created_at=UTCDateTime())
    rows = conn.execute(
        statement,
        {
            "query": match_query(words, conn.dialect.name),
            "user": user,
            "newer": newer.id,
            "limit": limit,
        },
    ).all()
    return [_record(row) for row in rows]


def review(
    conn: Connection,
    user: str,
    fact_id: int,
    *,
    obsolete: Sequence[int] | None,
    spend: Spend | None,
    now: datetime,
) -> int:
    """Count the model call's ``spend`` (None: no call was made); then, unless
    ``obsolete`` is None (no usable answer: the fact stays unreviewed, for the next
    review), let the fact supersede the ``obsolete`` older ones and mark it reviewed.
    Returns how many it superseded."""
    if spend is not None:
        record_spend(conn, user, spend, now=now)
    if obsolete is None:
        return 0
    superseded = supersede(conn, user, newer=fact_id, older=obsolete)
    reviewed(conn, [fact_id], now=now)
    return superseded


def supersede(conn: Connection, user: str, *, newer: int, older: Sequence[int]) -> int:
    """Let ``newer`` replace the person's live ``older`` facts; returns how many it did."""
    if not older:
        return 0
    statement = (
        update(memories)
        .where(memories.c.user_id == user, memories.c.id.in_(list(older)), _LIVE)
        .values(superseded_by=newer)
    )
    return int(conn.execute(statement).rowcount)


def reviewed(conn: Connection, ids: Sequence[int], *, now: datetime) -> None:
    """Maintenance has looked at these facts."""
    if ids:
        conn.execute(update(memories).where(memories.c.id.in_(list(ids))).values(reviewed_at=now))


def record_spend(conn: Connection, user: str, spend: Spend, *, now: datetime) -> None:
    """Count a maintenance model call's spend against the person (no conversation)."""
    if not spend.any:
        return
    conn.execute(
        insert(model_usage),
        {
            "day": day_of(now),
            "user_id": user,
            "conversation_id": None,
            "turn_id": None,
            "model": spend.model or "",
            "prompt_tokens": spend.prompt_tokens or 0,
            "completion_tokens": spend.completion_tokens or 0,
            "cost_usd": spend.cost_usd or 0.0,
            "created_at": now,
        },
    )


def _record(row: object) -> MemoryRecord:
    return MemoryRecord(
        id=int(row.id),  # type: ignore[attr-defined]
        scope=row.scope,  # type: ignore[attr-defined]
        about=row.about,  # type: ignore[attr-defined]
        fact=row.fact,  # type: ignore[attr-defined]
        source=row.source,  # type: ignore[attr-defined]
        created_at=row.created_at,  # type: ignore[attr-defined]
    )

"""A person's data: everything chatgate holds about them as one document (export), and its
removal (erasure); and the retention pass that removes everyone's old text.

Erasure keeps the shape of what happened and removes what was said: messages become a
tombstone, memories, ratings and schedules go, and the journal keeps each step's kind, status,
timing, model, tokens and cost while losing its text, arguments and results. Model spend
(``model_usage``) is not touched, so every total and budget reads the same after. The
person's id stays where it keys a count (turns, usage, access history, the audit log)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import JsonValue
from sqlalchemy import delete, func, or_, select, text, update
from sqlalchemy.engine import Connection

from agent_core.storage import audit
from agent_core.storage.schema import (
    access_events,
    approvals,
    attachments,
    conversations,
    dead_letters,
    feedback,
    ingress,
    jobs,
    memories,
    messages,
    model_usage,
    paired_users,
    pairing_requests,
    schedules,
    turn_steps,
    turns,
)

Json = dict[str, JsonValue]
ERASED = "[erased at the person's request]"
EXPIRED = "[removed: past the retention period]"
_BATCH = 500
# What a journal step keeps once its content is removed: enough to count and to cost.
_KEPT_OUTPUT = (
    "model",
    "role",
    "messages",
    "context_tokens",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "status",
    "decision",
    "decided_by",
    "call_id",
    "tool",
)
_KEPT_INPUT = ("model", "name", "call_id")


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _their_turns(conn: Connection, user: str) -> list[int]:
    return [
        int(i) for i in conn.execute(select(turns.c.id).where(turns.c.user_id == user)).scalars()
    ]


def _chunks(ids: Sequence[Any]) -> list[Sequence[Any]]:
    return [ids[i : i + _BATCH] for i in range(0, len(ids), _BATCH)]


# -- export ----------------------------------------------------------------------------------


def export(conn: Connection, user: str, *, now: datetime) -> Json:
    """Everything chatgate holds about ``user``: their messages and the replies to them,
    their turns, approvals, files, memories, schedules, usage and access history."""
    turn_ids = _their_turns(conn, user)
    said: list[JsonValue] = []
    seen: set[int] = set()
    for where in [messages.c.author == user] + [
        messages.c.turn_id.in_(chunk) for chunk in _chunks(turn_ids)
    ]:
        for row in conn.execute(select(messages).where(where).order_by(messages.c.id)):
            if int(row.id) in seen:
                continue
            seen.add(int(row.id))
            said.append(
                {
                    "id": int(row.id),
                    "conversation_id": row.conversation_id,
                    "role": row.role,
                    "author": row.author,
                    "text": row.text,
                    "turn_id": row.turn_id,
                    "created_at": _iso(row.created_at),
                }
            )
    said.sort(key=lambda m: m["id"] if isinstance(m, dict) else 0)  # type: ignore[arg-type,return-value]
    return {
        "user": user,
        "exported_at": now.isoformat(),
        "messages": said,
        "turns": [
            {
                "id": int(row.id),
                "conversation_id": row.conversation_id,
                "status": row.status,
                "prompt": row.prompt,
                "created_at": _iso(row.created_at),
                "finished_at": _iso(row.finished_at),
            }
            for row in conn.execute(
                select(turns).where(turns.c.user_id == user).order_by(turns.c.id)
            )
        ],
        "approvals": [
            {
                "id": row.id,
                "tool": row.tool,
                "arguments": row.arguments,
                "status": row.status,
                "decided_by": row.decided_by,
                "answer": row.answer,
                "created_at": _iso(row.created_at),
            }
            for row in conn.execute(
                select(approvals).where(approvals.c.requested_by == user).order_by(approvals.c.id)
            )
        ],
        "files": [
            {
                "name": row.name,
                "content_type": row.content_type or row.declared_type,
                "size": row.size or row.declared_size,
                "status": row.status,
                "transcript": row.transcript,
            }
            for row in conn.execute(
                select(attachments)
                .join(messages, messages.c.id == attachments.c.message_id)
                .where(messages.c.author == user)
                .order_by(attachments.c.id)
            )
        ],
        "memories": [
            {
                "id": int(row.id),
                "scope": row.scope,
                "about": row.about,
                "fact": row.fact,
                "created_at": _iso(row.created_at),
                "forgotten_at": _iso(row.forgotten_at),
            }
            for row in conn.execute(
                select(memories).where(memories.c.user_id == user).order_by(memories.c.id)
            )
        ],
        "schedules": [
            {
                "id": row.id,
                "conversation_id": row.conversation_id,
                "prompt": row.prompt,
                "kind": row.kind,
                "spec": row.spec,
                "timezone": row.timezone,
                "status": row.status,
                "created_at": _iso(row.created_at),
            }
            for row in conn.execute(
                select(schedules)
                .where(schedules.c.created_by == user)
                .order_by(schedules.c.created_at)
            )
        ],
        "usage": [
            {
                "day": row.day,
                "model": row.model,
                "prompt_tokens": int(row.prompt_tokens),
                "completion_tokens": int(row.completion_tokens),
                "cost_usd": float(row.cost),
            }
            for row in conn.execute(
                select(
                    model_usage.c.day,
                    model_usage.c.model,
                    func.sum(model_usage.c.prompt_tokens).label("prompt_tokens"),
                    func.sum(model_usage.c.completion_tokens).label("completion_tokens"),
                    func.sum(model_usage.c.cost_usd).label("cost"),
                )
                .where(model_usage.c.user_id == user)
                .group_by(model_usage.c.day, model_usage.c.model)
                .order_by(model_usage.c.day)
            )
        ],
        "feedback": [
            {
                "turn_id": int(row.turn_id),
                "conversation_id": row.conversation_id,
                "message_id": row.message_id,
                "rating": row.rating,
                "comment": row.comment,
                "asked_at": _iso(row.asked_at),
                "created_at": _iso(row.created_at),
                "updated_at": _iso(row.updated_at),
            }
            for row in conn.execute(
                select(feedback).where(feedback.c.user_id == user).order_by(feedback.c.id)
            )
        ],
        "access": {
            "paired": [
                {
                    "approved_by": row.approved_by,
                    "approved_at": _iso(row.approved_at),
                    "revoked_at": _iso(row.revoked_at),
                }
                for row in conn.execute(select(paired_users).where(paired_users.c.user_id == user))
            ],
            "pairing_requests": [
                {"code": row.code, "status": row.status, "created_at": _iso(row.created_at)}
                for row in conn.execute(
                    select(pairing_requests).where(pairing_requests.c.user_id == user)
                )
            ],
            "events": [
                {"at": _iso(row.at), "actor": row.actor, "action": row.action}
                for row in conn.execute(
                    select(access_events).where(access_events.c.user_id == user)
                )
            ],
        },
    }


# -- erasure ---------------------------------------------------------------------------------


def _stripped(value: Any, kept: Sequence[str], reason: str) -> JsonValue:
    """A journal step's input or output without its content: the fields that count."""
    if not isinstance(value, dict):
        return {"removed": reason} if value is not None else None
    out: Json = {k: value[k] for k in kept if k in value}
    calls = value.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [
            {
                "name": c.get("function", {}).get("name")
                if isinstance(c.get("function"), dict)
                else c.get("name")
            }
            for c in calls
            if isinstance(c, dict)
        ]
    out["removed"] = reason
    return out


def strip_steps(conn: Connection, turn_ids: Sequence[int], reason: str) -> int:
    """Remove the text, arguments and results of these turns' journal steps."""
    count = 0
    for chunk in _chunks(list(turn_ids)):
        rows = conn.execute(
            select(turn_steps.c.id, turn_steps.c.input, turn_steps.c.output).where(
                turn_steps.c.turn_id.in_(chunk)
            )
        ).all()
        for row in rows:
            if isinstance(row.output, dict) and row.output.get("removed"):
                continue
            conn.execute(
                update(turn_steps)
                .where(turn_steps.c.id == row.id)
                .values(
                    input=_stripped(row.input, _KEPT_INPUT, reason),
                    output=_stripped(row.output, _KEPT_OUTPUT, reason),
                )
            )
            count += 1
    return count


def forget(conn: Connection, user: str, *, actor: str, now: datetime) -> tuple[Json, Json]:
    """Erase ``user``'s data (see the module's text). Returns the receipt (also written to
    the audit log) and the files outside the database for the caller to remove: ``blobs``
    (stored files no one else's message refers to any more), ``uploads`` (web uploads by
    id) and ``conversations`` (whose sandbox inboxes may hold copies of those blobs); and
    ``running``: the ids of their turns that were running (asked to stop)."""
    turn_ids = _their_turns(conn, user)
    # What still waits for them ends, and what runs stops at its next step (the process
    # running it reads the stop from the journal): its content is about to go.
    ended_turns = cancelled = 0
    running_ids: list[int] = []
    for chunk in _chunks(turn_ids):
        ended_turns += conn.execute(
            update(turns)
            .where(turns.c.id.in_(chunk), turns.c.status.in_(("pending", "waiting")))
            .values(status="failed", error="erased at the person's request", finished_at=now)
        ).rowcount
        stopping = [
            int(i)
            for i in conn.execute(
                update(turns)
                .where(turns.c.id.in_(chunk), turns.c.status == "running")
                .values(stop_requested_by=actor)
                .returning(turns.c.id)
            ).scalars()
        ]
        running_ids += stopping
        cancelled += conn.execute(
            update(approvals)
            .where(approvals.c.turn_id.in_(chunk), approvals.c.status == "pending")
            .values(status="cancelled", decided_by=actor, decided_at=now)
        ).rowcount
        conn.execute(
            update(jobs)
            .where(jobs.c.turn_id.in_(chunk), jobs.c.status.in_(("queued", "waiting")))
            .values(status="failed", error="erased at the person's request", finished_at=now)
        )
    # Their memory work (fact extraction, the nightly review) ends too: a job that is
    # running finds itself closed and stores nothing.
    conn.execute(
        update(jobs)
        .where(jobs.c.user_id == user, jobs.c.status.in_(("queued", "running", "waiting")))
        .values(status="failed", error="erased at the person's request", finished_at=now)
    )
    message_ids: list[int] = [
        int(i)
        for i in conn.execute(select(messages.c.id).where(messages.c.author == user)).scalars()
    ]
    for chunk in _chunks(turn_ids):
        message_ids += [
            int(i)
            for i in conn.execute(
                select(messages.c.id).where(messages.c.turn_id.in_(chunk))
            ).scalars()
        ]
    message_ids = sorted(set(message_ids))
    # Their words quoted in other people's replies go too.
    conn.execute(
        update(messages).where(messages.c.quote["author"].as_string() == user).values(quote=None)
    )
    touched: set[str] = set()
    hashes: set[str] = set()
    uploads: set[str] = set()
    for chunk in _chunks(message_ids):
        touched.update(
            conn.execute(
                select(messages.c.conversation_id).where(messages.c.id.in_(chunk)).distinct()
            ).scalars()
        )
        conn.execute(
            update(messages)
            .where(messages.c.id.in_(chunk))
            .values(text=ERASED, payload=None, quote=None)
        )
        for sha256, file_id, platform in conn.execute(
            select(attachments.c.sha256, attachments.c.platform_file_id, conversations.c.platform)
            .join(conversations, conversations.c.id == attachments.c.conversation_id)
            .where(attachments.c.message_id.in_(chunk))
        ).all():
            if sha256:
                hashes.add(sha256)
            if file_id and platform == "web":
                uploads.add(file_id)
        conn.execute(
            update(attachments)
            .where(attachments.c.message_id.in_(chunk))
            .values(name="[erased]", url=None, platform_file_id=None, transcript=None, error=None,
                    sha256=None, declared_type=None, content_type=None)
        )  # fmt: skip
        conn.execute(update(ingress).where(ingress.c.message_id.in_(chunk)).values(payload="{}"))
    for chunk in _chunks(turn_ids):
        conn.execute(update(ingress).where(ingress.c.turn_id.in_(chunk)).values(payload="{}"))
        conn.execute(update(turns).where(turns.c.id.in_(chunk)).values(prompt=None))
    steps = strip_steps(conn, turn_ids, "erased")
    conn.execute(
        update(approvals)
        .where(approvals.c.requested_by == user)
        .values(arguments={"removed": "erased"}, answer=None)
    )
    # What they answered someone else's question (a trigger's turn asks its members).
    conn.execute(
        update(approvals)
        .where(approvals.c.decided_by == user, approvals.c.answer.is_not(None))
        .values(answer="(erased)")
    )
    for chunk in _chunks(turn_ids):
        conn.execute(
            update(approvals)
            .where(approvals.c.turn_id.in_(chunk))
            .values(arguments={"removed": "erased"}, answer=None)
        )
    # A summary of a conversation they spoke in holds their words: it is made again from
    # what is left.
    for chunk in _chunks(sorted(touched)):
        conn.execute(
            update(conversations)
            .where(conversations.c.id.in_(chunk))
            .values(summary=None, summary_turn=None)
        )
    memories_removed = conn.execute(delete(memories).where(memories.c.user_id == user)).rowcount
    # Their ratings go whole: a comment is their words, and a bare rating says what they
    # thought. (The audit log keeps that they rated, by ids.)
    rated = conn.execute(delete(feedback).where(feedback.c.user_id == user)).rowcount
    if conn.dialect.name == "sqlite":
        # The full-text index keeps deleted terms in its segments until they are merged.
        conn.execute(text("INSERT INTO memories_fts(memories_fts) VALUES ('optimize')"))
    schedule_ids = list(
        conn.execute(select(schedules.c.id).where(schedules.c.created_by == user)).scalars()
    )
    if schedule_ids:
        conn.execute(
            update(schedules)
            .where(schedules.c.id.in_(schedule_ids))
            .values(status="deleted", prompt=ERASED, next_run_at=None, updated_at=now)
        )
        conn.execute(
            update(jobs)
            .where(jobs.c.schedule_id.in_(schedule_ids), jobs.c.status.in_(("queued", "waiting")))
            .values(status="failed", error="erased at the person's request", finished_at=now)
        )
    # Files still referred to by someone else's message stay.
    still = (
        set(
            conn.execute(
                select(attachments.c.sha256).where(attachments.c.sha256.in_(sorted(hashes)))
            ).scalars()
        )
        if hashes
        else set()
    )
    receipt: Json = {
        "user": user,
        "erased_at": now.isoformat(),
        "messages": len(message_ids),
        "turns": len(turn_ids),
        "journal_steps": steps,
        "memories": int(memories_removed or 0),
        "ratings": int(rated or 0),
        "schedules": len(schedule_ids),
        "files": len(hashes - still),
        "stopped_turns": int(ended_turns or 0),
        "running_turns": len(running_ids),
        "cancelled_approvals": int(cancelled or 0),
    }
    audit.append(conn, actor=actor, action="person.erase", subject=user, detail=receipt, now=now)
    leftovers: Json = {
        "blobs": list[JsonValue](sorted(hashes - still)),
        "uploads": list[JsonValue](sorted(uploads)),
        "conversations": list[JsonValue](sorted(touched)),
        "running": list[JsonValue](running_ids),
    }
    return receipt, leftovers


# -- retention -------------------------------------------------------------------------------


def running_turns(conn: Connection, user: str) -> int:
    """How many of ``user``'s turns are running (an erasure waits for them to stop)."""
    return int(
        conn.execute(
            select(func.count()).where(turns.c.user_id == user, turns.c.status == "running")
        ).scalar_one()
    )


def expirable_turns(conn: Connection, *, before: datetime, since: datetime | None) -> list[int]:
    """Finished turns created in ``[since, before)`` (all before ``before`` when ``since``
    is None): whose journal content retention removes."""
    finished = select(turns.c.id).where(
        turns.c.created_at < before, turns.c.status.in_(("done", "failed"))
    )
    if since is not None:
        finished = finished.where(turns.c.created_at >= since)
    return [int(i) for i in conn.execute(finished.order_by(turns.c.id)).scalars()]


def expire_turns(conn: Connection, turn_ids: Sequence[int]) -> int:
    """Remove these finished turns' journal content, prompts, transcripts, approval
    arguments and the comments on their replies (the ratings stay: they hold no text);
    how many steps changed."""
    steps = strip_steps(conn, turn_ids, "retention")
    conn.execute(
        update(turns)
        .where(turns.c.id.in_(turn_ids), turns.c.prompt.is_not(None))
        .values(prompt=None)
    )
    conn.execute(
        update(attachments).where(attachments.c.turn_id.in_(turn_ids)).values(transcript=None)
    )
    conn.execute(
        update(approvals)
        .where(approvals.c.turn_id.in_(turn_ids), approvals.c.status != "pending")
        .values(arguments={"removed": "retention"}, answer=None)
    )
    conn.execute(
        update(feedback)
        .where(feedback.c.turn_id.in_(turn_ids), feedback.c.comment != "")
        .values(comment=EXPIRED)
    )
    return steps


def expire_message_batch(
    conn: Connection, *, before: datetime, since: datetime | None, after_id: int, limit: int
) -> tuple[int, int | None]:
    """Replace the text of up to ``limit`` messages created in the window (ids above
    ``after_id``), except those an open turn still reads: how many, and the last id looked
    at (None: the window is done)."""
    window = [messages.c.created_at < before, messages.c.id > after_id]
    if since is not None:
        window.append(messages.c.created_at >= since)
    ids = [
        int(i)
        for i in conn.execute(
            select(messages.c.id).where(*window).order_by(messages.c.id).limit(limit)
        ).scalars()
    ]
    if not ids:
        return 0, None
    open_turns = select(turns.c.id).where(turns.c.status.in_(("pending", "running", "waiting")))
    changed = conn.execute(
        update(messages)
        .where(
            messages.c.id.in_(ids),
            messages.c.text.not_in((ERASED, EXPIRED)),
            or_(messages.c.turn_id.is_(None), messages.c.turn_id.not_in(open_turns)),
        )
        .values(text=EXPIRED, payload=None)
    ).rowcount
    return int(changed or 0), ids[-1]


def expire_rest(
    conn: Connection,
    *,
    before: datetime,
    since: datetime | None,
    messages_changed: int,
    steps: int,
    actor: str,
) -> Json:
    """The pass's last transaction: raw platform updates received in the window are
    emptied, updates set aside (dead letters) before ``before`` go, and the pass is
    recorded in the audit log."""
    received = [ingress.c.received_at < before, ingress.c.payload != "{}"]
    if since is not None:
        received.append(ingress.c.received_at >= since)
    conn.execute(update(ingress).where(*received).values(payload="{}"))
    dropped = conn.execute(delete(dead_letters).where(dead_letters.c.created_at < before)).rowcount
    done: Json = {
        "before": before.isoformat(),
        "messages": messages_changed,
        "journal_steps": steps,
        "dead_letters": int(dropped or 0),
    }
    if messages_changed or steps or dropped:
        audit.append(conn, actor=actor, action="retention.expire", detail=done)
    return done

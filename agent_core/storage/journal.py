"""The turn journal: turns and their steps, the transactions behind ``Store``'s journal
methods (see ``agent_core.loop`` for what the steps mean)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from pydantic import JsonValue
from sqlalchemy import bindparam, exists, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Row

from agent_core.events import ConversationKey, utcnow
from agent_core.journaled import ModelCallOutput
from agent_core.quoting import with_quote
from agent_core.records import (
    FinishedStep,
    Role,
    StepKind,
    StepRecord,
    StepStatus,
    StopRequest,
    TurnRecord,
    TurnStatus,
    Usage,
)
from agent_core.storage import audit
from agent_core.storage import usage as usage_sql
from agent_core.storage.columns import UTCDateTime
from agent_core.storage.schema import (
    approvals,
    attachments,
    conversations,
    messages,
    turn_steps,
    turns,
)

OPEN: tuple[TurnStatus, ...] = ("pending", "running")
"""Turns that still have work to do (``waiting`` ones wait for a person, not for us)."""

# Statements are built once with bind parameters (``b_`` names: an UPDATE may not bind a
# name that is also one of its columns).


# What starting a turn needs of it besides its row: where it stalled last, its
# conversation's key and the message that opened it (one read).
_HEAD = (
    select(
        turns.c.id,
        turns.c.status,
        turns.c.stalls,
        turns.c.stalled_at,
        conversations.c.platform,
        conversations.c.workspace,
        conversations.c.channel,
        conversations.c.thread,
        conversations.c.busy_mode,
        conversations.c.profile.label("pinned_profile"),
        conversations.c.model.label("pinned_model"),
        select(messages.c.text)
        .where(messages.c.turn_id == turns.c.id, messages.c.role == "user")
        .order_by(messages.c.id)
        .limit(1)
        .scalar_subquery()
        .label("trigger"),
        select(messages.c.quote)
        .where(messages.c.turn_id == turns.c.id, messages.c.role == "user")
        .order_by(messages.c.id)
        .limit(1)
        .scalar_subquery()
        .label("trigger_quote"),
        exists().where(attachments.c.turn_id == turns.c.id).label("has_files"),
    )
    .select_from(turns)
    .join(conversations, conversations.c.id == turns.c.conversation_id)
)
_NEXT_OPEN = (
    _HEAD.where(
        turns.c.conversation_id == bindparam("b_id"),
        turns.c.status.in_(OPEN),
        turns.c.lane == "inline",
    )
    .order_by(turns.c.id)
    .limit(1)
)
_HEAD_OF = _HEAD.where(turns.c.id == bindparam("b_turn"))


_START = (
    update(turns)
    .where(turns.c.id == bindparam("b_turn"))
    .values(
        status="running",
        attempts=turns.c.attempts + 1,
        stalls=bindparam("b_stalls"),
        stalled_at=bindparam("b_at"),
        started_at=func.coalesce(turns.c.started_at, bindparam("b_now", type_=UTCDateTime())),
    )
    .returning(*turns.c)
)


def _stalls(head: Any, steps: Sequence[Row[Any]]) -> tuple[int, int]:
    """(stalls, place) for an attempt about to start, from ``head`` (the turn's status,
    stalls and stalled_at before it) and its steps in order. A turn found ``running`` was left
    by an attempt that did not end (its process died, or it raised): that attempt stalled
    at the journal's last step, started or finished. The same place as the attempt before
    it is one more stall in a row; any progress in between starts the count again at one."""
    last = steps[-1] if steps else None
    place = 0 if last is None else 2 * int(last.seq) + (last.status != "started")
    if head.status != "running":
        return 0, place
    return (int(head.stalls) + 1 if head.stalled_at == place else 1), place


_TURN = select(turns).where(turns.c.id == bindparam("b_turn"))


_STEPS = (
    select(turn_steps).where(turn_steps.c.turn_id == bindparam("b_turn")).order_by(turn_steps.c.seq)
)


_FINISH_TURN = (
    update(turns)
    .where(turns.c.id == bindparam("b_turn"))
    .values(
        status=bindparam("b_status"), error=bindparam("b_error"), finished_at=bindparam("b_now")
    )
)


_INSERT_STEP = insert(turn_steps)


_UPDATE_STEP = (
    update(turn_steps)
    .where(turn_steps.c.turn_id == bindparam("b_turn"), turn_steps.c.seq == bindparam("b_seq"))
    .values(
        status=bindparam("b_status"), output=bindparam("b_output"), finished_at=bindparam("b_now")
    )
)


_RECEIPT = (
    update(messages)
    .where(messages.c.delivery_key == bindparam("b_key"))
    .values(platform_message_id=bindparam("b_receipt"))
)


_BEGIN_STEP = {
    "sqlite": sqlite.insert(turn_steps).on_conflict_do_nothing(index_elements=["turn_id", "seq"]),
    "postgresql": postgresql.insert(turn_steps).on_conflict_do_nothing(
        index_elements=["turn_id", "seq"]
    ),
}


INSERT_MESSAGE = insert(messages).returning(messages.c.id)


def begin_next(conn: Connection, conversation_id: str) -> TurnRecord | None:
    head = conn.execute(_NEXT_OPEN, {"b_id": conversation_id}).first()
    return None if head is None else start(conn, int(head.id), head=head)


def start(conn: Connection, turn_id: int, *, head: Any = None) -> TurnRecord:
    """Begin an attempt at the turn (``head``: what ``_HEAD`` reads of it, when the
    caller just read it)."""
    if head is None:
        head = conn.execute(_HEAD_OF, {"b_turn": turn_id}).one()
    steps = conn.execute(_STEPS, {"b_turn": turn_id}).all()
    stalls, place = _stalls(head, steps)
    row = conn.execute(
        _START, {"b_turn": turn_id, "b_now": utcnow(), "b_stalls": stalls, "b_at": place}
    ).one()
    # RETURNING shows the row after the update: report the attempts made before this one.
    return _turn_record(conn, row, head, attempts=int(row.attempts) - 1, steps=steps)


def load_turn(conn: Connection, turn_id: int) -> TurnRecord:
    row = conn.execute(_TURN, {"b_turn": turn_id}).one()
    head = conn.execute(_HEAD_OF, {"b_turn": turn_id}).one()
    return _turn_record(conn, row, head, attempts=int(row.attempts))


def _turn_record(
    conn: Connection,
    row: Row[Any],
    head: Any,
    *,
    attempts: int,
    steps: Sequence[Row[Any]] | None = None,
) -> TurnRecord:
    """The turn as the loop sees it, from its row and ``head`` (``steps`` when just read)."""
    trigger = (
        row.prompt
        if row.prompt is not None
        else None
        if head.trigger is None
        else with_quote(head.trigger, head.trigger_quote)
    )
    if trigger is None and row.merged_into is not None:
        trigger = ""  # its message was taken into turn ``merged_into``, and lives there now
    if trigger is None:
        raise LookupError(f"turn {row.id} has no opening message")
    if steps is None:
        steps = conn.execute(_STEPS, {"b_turn": row.id}).all()
    return TurnRecord(
        id=int(row.id),
        conversation_id=row.conversation_id,
        conversation=conversation_key(head),
        status=row.status,
        attempts=attempts,
        stalls=int(row.stalls),
        user=row.user_id,
        trigger_text=trigger,
        reply_to=row.reply_to,
        created_at=row.created_at,
        steps=tuple(_step(step) for step in steps),
        error=row.error,
        queued=row.prompt is not None,
        quiet=bool(row.quiet),
        live_message=row.live_message,
        stop_requested_by=row.stop_requested_by,
        busy_mode=head.busy_mode,
        pinned_profile=head.pinned_profile,
        pinned_model=head.pinned_model,
        marked=row.marked,
        has_files=bool(head.has_files),
    )


_CHUNKS = (
    update(turn_steps)
    .where(
        turn_steps.c.turn_id == bindparam("b_turn"),
        turn_steps.c.seq == bindparam("b_seq"),
        turn_steps.c.status == "started",
    )
    .values(output=bindparam("b_output"))
)


_MARKED = update(turns).where(turns.c.id == bindparam("b_turn")).values(marked=bindparam("b_state"))


def marked(conn: Connection, turn_id: int, state: str) -> None:
    """The state shown on the turn's message."""
    conn.execute(_MARKED, {"b_turn": turn_id, "b_state": state})


_LIVE_MESSAGE = (
    update(turns)
    .where(turns.c.id == bindparam("b_turn"))
    .values(live_message=bindparam("b_message"))
)


def live_message(conn: Connection, turn_id: int, message: str) -> None:
    """The message the turn's reply is shown in as it is written."""
    conn.execute(_LIVE_MESSAGE, {"b_turn": turn_id, "b_message": message})


_CURRENT_TURN = (
    select(turns.c.id, turns.c.status, turns.c.stop_requested_by)
    .where(
        turns.c.conversation_id == bindparam("b_id"),
        turns.c.status.in_((*OPEN, "waiting")),
        turns.c.lane == "inline",
    )
    .order_by(turns.c.id)
    .limit(1)
)
_CURRENT_TURN_BEFORE = _CURRENT_TURN.where(turns.c.id < bindparam("b_before"))
_ASK_STOP = (
    update(turns)
    .where(turns.c.id == bindparam("b_turn"), turns.c.stop_requested_by.is_(None))
    .values(stop_requested_by=bindparam("b_user"))
)
_STOP_ASKED = select(turns.c.stop_requested_by).where(turns.c.id == bindparam("b_turn"))
_PENDING_APPROVALS = (
    select(approvals.c.id)
    .where(approvals.c.turn_id == bindparam("b_turn"), approvals.c.status == "pending")
    .order_by(approvals.c.seq)
)


def request_stop(
    conn: Connection,
    conversation_id: str,
    user: str,
    *,
    before_turn: int | None = None,
    only_turn: int | None = None,
) -> StopRequest | None:
    """Ask the conversation's current turn (the first one not finished, older than
    ``before_turn`` when given) to stop, if it is ``only_turn`` (when given); None when it
    has none. The first to ask is the one the turn names."""
    if before_turn is None:
        row = conn.execute(_CURRENT_TURN, {"b_id": conversation_id}).first()
    else:
        found = conn.execute(
            _CURRENT_TURN_BEFORE, {"b_id": conversation_id, "b_before": before_turn}
        )
        row = found.first()
    if row is None or (only_turn is not None and row.id != only_turn):
        return None
    conn.execute(_ASK_STOP, {"b_turn": row.id, "b_user": user})
    waits_for = conn.execute(_PENDING_APPROVALS, {"b_turn": row.id}).scalars()
    return StopRequest(
        turn_id=int(row.id),
        status=row.status,
        by=row.stop_requested_by or user,
        approvals=tuple(str(found) for found in waits_for),
    )


def stop_requested(conn: Connection, turn_id: int) -> str | None:
    """Who asked the turn to stop, if anyone did."""
    found = conn.execute(_STOP_ASKED, {"b_turn": turn_id}).scalar()
    return str(found) if found is not None else None


_LATER_PENDING = (
    select(turns.c.id, turns.c.user_id)
    .where(
        turns.c.conversation_id == bindparam("b_id"),
        turns.c.id > bindparam("b_turn"),
        turns.c.status == "pending",
        turns.c.lane == "inline",
    )
    .order_by(turns.c.id)
)
_MERGE = (
    update(turns)
    .where(turns.c.id.in_(bindparam("b_ids", expanding=True)), turns.c.status == "pending")
    .values(status="done", merged_into=bindparam("b_turn"), finished_at=bindparam("b_now"))
)
_THEIR_TEXTS = (
    select(messages.c.text)
    .where(messages.c.turn_id.in_(bindparam("b_ids", expanding=True)), messages.c.role == "user")
    .order_by(messages.c.id)
)
_MOVE_MESSAGES = (
    update(messages)
    .where(messages.c.turn_id.in_(bindparam("b_ids", expanding=True)), messages.c.role == "user")
    .values(turn_id=bindparam("b_turn"))
)


def take_in(conn: Connection, turn: TurnRecord, seq: int) -> list[str]:
    """The messages that arrived after ``turn``'s and wait for turns of their own, taken
    into it instead (busy modes ``steer`` and ``collect``), in order: their turns are done
    (``merged_into``), their messages become this turn's, and the journal's ``steer`` step
    at ``seq`` holds their texts, so a resumed turn sees them again. Empty (no step) when
    none waits.

    Only the turn's own person's messages, up to the first from someone else: a turn acts
    as its person (their grants, their memory), so another person's words wait for a turn
    of their own, and keep their place."""
    waiting = conn.execute(_LATER_PENDING, {"b_id": turn.conversation_id, "b_turn": turn.id})
    theirs = itertools.takewhile(lambda row: row.user_id == turn.user, waiting)
    ids = [int(row.id) for row in theirs]
    if not ids:
        return []
    texts = [str(t) for t in conn.execute(_THEIR_TEXTS, {"b_ids": ids}).scalars()]
    conn.execute(_MERGE, {"b_ids": ids, "b_turn": turn.id, "b_now": utcnow()})
    conn.execute(_MOVE_MESSAGES, {"b_ids": ids, "b_turn": turn.id})
    begin_step(conn, turn.id, seq, kind="steer", input={"turns": list(ids), "texts": list(texts)})
    finish_step(conn, turn.id, seq, kind="steer", status="done", output={"taken": len(ids)})
    return texts


def reply_chunks_sent(conn: Connection, turn_id: int, seq: int, receipts: list[str]) -> None:
    """The leading chunks of a reply that went out, while the rest are still to send."""
    conn.execute(_CHUNKS, {"b_turn": turn_id, "b_seq": seq, "b_output": {"chunks": list(receipts)}})


def finish_turn(conn: Connection, turn_id: int, *, status: TurnStatus, error: str | None) -> None:
    conn.execute(
        _FINISH_TURN, {"b_turn": turn_id, "b_status": status, "b_error": error, "b_now": utcnow()}
    )


def begin_step(
    conn: Connection, turn_id: int, seq: int, *, kind: StepKind, input: JsonValue
) -> None:
    conn.execute(
        _BEGIN_STEP[conn.dialect.name],
        {
            "turn_id": turn_id,
            "seq": seq,
            "kind": kind,
            "status": "started",
            "input": input,
            "idempotency_key": f"{turn_id}:{seq}",
            "started_at": utcnow(),
        },
    )


def finish_step(
    conn: Connection,
    turn_id: int,
    seq: int,
    *,
    kind: StepKind,
    status: StepStatus,
    output: JsonValue,
) -> None:
    now = utcnow()
    if kind == "model_call" and status == "done":
        # Counted with its journal entry.
        usage_sql.record(conn, turn_id, ModelCallOutput.from_json(output).spend, now=now)
    params = {"b_turn": turn_id, "b_seq": seq, "b_status": status, "b_output": output, "b_now": now}
    if conn.execute(_UPDATE_STEP, params).rowcount:
        if kind == "tool_call":
            audit.tool_ran(conn, turn_id, seq, _outcome(output, status), now=now)
        return
    conn.execute(
        _INSERT_STEP,
        {
            "turn_id": turn_id,
            "seq": seq,
            "kind": kind,
            "status": status,
            "output": output,
            "idempotency_key": f"{turn_id}:{seq}",
            "started_at": now,
            "finished_at": now,
        },
    )
    if kind == "tool_call":
        # A call that never started (refused, expired, unknown, bad arguments) is audited too.
        audit.tool_ran(conn, turn_id, seq, _outcome(output, status), now=now)


def _outcome(output: JsonValue, status: str) -> str:
    """How a tool call ended, as its journaled output says (``ok``, ``error``, ``denied`` ...)."""
    said = output.get("status") if isinstance(output, dict) else None
    return str(said) if said else status


def reply_intent(
    conn: Connection,
    turn: TurnRecord,
    seq: int,
    *,
    role: Role,
    text: str,
    delivery_key: str,
    answered: FinishedStep | None = None,
) -> int:
    if answered is not None:
        finish_step(
            conn,
            turn.id,
            answered.seq,
            kind=answered.kind,
            status=answered.status,
            output=answered.output,
        )
    now = utcnow()
    message_id = int(
        conn.execute(
            INSERT_MESSAGE,
            {
                "conversation_id": turn.conversation_id,
                "role": role,
                "text": text,
                "author": None,
                "turn_id": turn.id,
                "delivery_key": delivery_key,
                "created_at": now,
            },
        ).scalar_one()
    )
    conn.execute(
        _INSERT_STEP,
        {
            "turn_id": turn.id,
            "seq": seq,
            "kind": "reply",
            "status": "started",
            "input": {"role": role, "text": text, "message_id": message_id},
            "idempotency_key": delivery_key,
            "started_at": now,
        },
    )
    return message_id


def reply_sent(
    conn: Connection,
    turn_id: int,
    seq: int,
    *,
    receipt: str,
    turn_status: TurnStatus | None,
    error: str | None,
) -> None:
    finish_step(conn, turn_id, seq, kind="reply", status="done", output={"receipt": receipt})
    conn.execute(_RECEIPT, {"b_key": f"{turn_id}:{seq}", "b_receipt": receipt})
    if turn_status is not None:
        finish_turn(conn, turn_id, status=turn_status, error=error)


def usage(conn: Connection, conversation_id: str) -> Usage:
    calls = (
        select(
            func.count(),
            func.coalesce(func.sum(turn_steps.c.output["prompt_tokens"].as_integer()), 0),
            func.coalesce(func.sum(turn_steps.c.output["completion_tokens"].as_integer()), 0),
        )
        .select_from(turn_steps.join(turns, turns.c.id == turn_steps.c.turn_id))
        .where(
            turns.c.conversation_id == conversation_id,
            turn_steps.c.kind == "model_call",
            turn_steps.c.status == "done",
        )
    )
    count, prompt, completion = conn.execute(calls).one()
    turn_count = conn.execute(
        select(func.count()).select_from(turns).where(turns.c.conversation_id == conversation_id)
    ).scalar_one()
    return Usage(
        turns=int(turn_count),
        model_calls=int(count),
        prompt_tokens=int(prompt),
        completion_tokens=int(completion),
    )


def _step(row: Row[Any]) -> StepRecord:
    return StepRecord(
        turn_id=int(row.turn_id),
        seq=row.seq,
        kind=row.kind,
        status=row.status,
        input=row.input,
        output=row.output,
        idempotency_key=row.idempotency_key,
    )


def conversation_key(row: Any) -> ConversationKey:
    """The key from a row that has platform, workspace, channel and thread columns."""
    return ConversationKey(
        platform=row.platform,
        workspace=row.workspace,
        channel=row.channel,
        thread=row.thread or None,
    )

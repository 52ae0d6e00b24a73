"""The operator console: ``GET /console`` (a static page) over ``/api/console/...``.

Same door as the web chat (``api.access_middleware``): a token holder, or without a token a
loopback client with no proxy between. Everything here acts as the console's operator
(``console:operator``, an admin), and each change it makes is in the audit log."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from aiohttp import web

from adapters.http import json_error
from agent_core.access import CONSOLE_OPERATOR
from agent_core.errors import (
    AlreadyDecided,
    ApprovalNotFound,
    NotAllowedToChange,
    NotAllowedToDecide,
    ScheduleActionError,
)
from agent_core.records import ApprovalDecision, ScheduleRecord
from agent_core.scheduling.recurrence import Recurrence, ScheduleError
from gateway import console_health, console_people
from gateway.console_query import (
    Bad,
    handler,
    query_cursor,
    query_int,
    query_limit,
    query_text,
    runtime_of,
)
from gateway.inbound import refusal
from gateway.routes import read_json
from gateway.runtime import Runtime

STATIC = Path(__file__).with_name("web") / "static"
_DECISIONS: tuple[ApprovalDecision, ...] = ("approve", "allow_conversation", "deny")


async def page(request: web.Request) -> web.FileResponse:
    """The console page (it holds no data: everything comes from the API)."""
    return web.FileResponse(STATIC / "console.html")


# -- conversations and turns -----------------------------------------------------------------


@handler
async def conversations(request: web.Request) -> web.Response:
    """Conversations on every platform; ``q`` searches their messages."""
    before = query_text(request, "before")
    query = query_text(request, "q")
    if before and query:
        before = str(query_int(request, "before"))
    elif before:
        before = query_cursor(request)
    found = await runtime_of(request).operations.conversations(
        query=query,
        platform=query_text(request, "platform"),
        before=before,
        limit=query_limit(request),
    )
    return web.json_response(found)


@handler
async def conversation_messages(request: web.Request) -> web.Response:
    """One conversation's messages, newest first (``before`` a message id)."""
    runtime = runtime_of(request)
    conversation = await runtime.store.conversation(request.match_info["id"])
    if conversation is None:
        return json_error(404, "no such conversation")
    items = await runtime.operations.conversation_messages(
        conversation.id,
        before=query_int(request, "before"),
        limit=query_limit(request, default=100),
    )
    return web.json_response({"items": items})


@handler
async def turns(request: web.Request) -> web.Response:
    """Turns newest first, filtered by conversation, person or status."""
    found = await runtime_of(request).operations.turns(
        conversation_id=query_text(request, "conversation"),
        user=query_text(request, "user"),
        status=query_text(request, "status"),
        before=query_int(request, "before"),
        limit=query_limit(request),
    )
    return web.json_response(found)


@handler
async def turn(request: web.Request) -> web.Response:
    """One turn's timeline from the journal."""
    try:
        turn_id = int(request.match_info["id"])
    except ValueError:
        return json_error(404, "no such turn")
    found = await runtime_of(request).operations.timeline(turn_id) if turn_id < 2**63 else None
    if found is None:
        return json_error(404, "no such turn")
    return web.json_response(found)


@handler
async def feedback(request: web.Request) -> web.Response:
    """Rated turns, the newest rating first; ``rating=up`` or ``down`` filters."""
    rating = query_text(request, "rating")
    if rating not in (None, "up", "down"):
        raise Bad("'rating' must be up or down")
    found = await runtime_of(request).operations.feedback(
        rating=rating, before=query_int(request, "before"), limit=query_limit(request)
    )
    return web.json_response(found)


# -- approvals -------------------------------------------------------------------------------


@handler
async def approvals(request: web.Request) -> web.Response:
    """``state=pending`` (the default) or ``decided``."""
    state = request.query.get("state", "pending")
    if state not in ("pending", "decided"):
        raise Bad("'state' must be pending or decided")
    found = await runtime_of(request).operations.approvals(
        pending=state == "pending", before=query_cursor(request), limit=query_limit(request)
    )
    return web.json_response(found)


async def decide(request: web.Request) -> web.Response:
    """Decide a pending approval as the operator: the turn resumes where it waits, and the
    prompt in the chat says who decided."""
    body = await read_json(request)
    decision = body.get("decision") if isinstance(body, dict) else None
    if decision not in _DECISIONS:
        return json_error(400, f"'decision' must be one of {', '.join(_DECISIONS)}")
    runtime = runtime_of(request)
    try:
        decided = await runtime.inbound.decide(
            request.match_info["id"], decision=decision, user=CONSOLE_OPERATOR
        )
    except ApprovalNotFound:
        return json_error(404, "no such approval")
    except NotAllowedToDecide as exc:
        return json_error(403, refusal(exc))
    except AlreadyDecided:
        current = await runtime.store.approval(request.match_info["id"])
        status = current.status if current is not None else "decided"
        return json_error(409, f"already {status}")
    return web.json_response({"id": decided.id, "status": decided.status})


# -- schedules -------------------------------------------------------------------------------


def _fire_times(row: Any, count: int = 5) -> list[str]:
    """The next ``count`` fire times, in the schedule's own time zone."""
    if row.status != "active":
        return []
    try:
        recurrence = Recurrence.from_stored(row.kind, row.spec, row.timezone, row.anchor)
        zone = ZoneInfo(row.timezone)
    except (ScheduleError, ValueError, KeyError):  # ZoneInfoNotFoundError is a KeyError
        return []
    times: list[str] = []
    at = row.next_run_at
    while at is not None and len(times) < count:
        times.append(at.astimezone(zone).isoformat())
        at = recurrence.next_after(at)
    return times


@handler
async def schedules(request: web.Request) -> web.Response:
    """Every schedule with its next five fire times and its latest runs."""
    runtime = runtime_of(request)
    rows = await runtime.operations.schedules(include_deleted=request.query.get("deleted") == "1")
    items = []
    for row, targets, runs in rows:
        try:
            when = Recurrence.from_stored(row.kind, row.spec, row.timezone, row.anchor).describe()
        except ScheduleError as exc:  # a row no release wrote: shown, not a failed page
            when = f"unreadable schedule ({exc})"
        items.append(
            {
                "id": row.id,
                "conversation_id": row.conversation_id,
                "platform": row.platform,
                "channel": row.channel,
                "created_by": row.created_by,
                "prompt": row.prompt,
                "when": when,
                "kind": row.kind,
                "spec": row.spec,
                "timezone": row.timezone,
                "status": row.status,
                "failures": int(row.failures),
                "next_run_at": row.next_run_at.isoformat() if row.next_run_at else None,
                "next_fire_times": _fire_times(row),
                "targets": targets,
                "runs": runs,
            }
        )
    return web.json_response({"items": items})


@handler
async def schedule_runs(request: web.Request) -> web.Response:
    """One schedule's runs, newest first."""
    runs = await runtime_of(request).operations.schedule_runs(
        request.match_info["id"], limit=query_limit(request)
    )
    return web.json_response({"items": runs})


def _field(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    return None if value is None else _required(body, name)


def _required(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value.strip() or len(value) > 4000:
        raise Bad(f"'{name}' must be a non-empty string (at most 4000 characters)")
    return value.strip()


@handler
async def create_schedule(request: web.Request) -> web.Response:
    """``{"conversation_id", "prompt", "schedule", "timezone"?}``: 201 with the schedule;
    its results go to that conversation."""
    runtime = runtime_of(request)
    body = await read_json(request)
    if not isinstance(body, dict):
        return json_error(400, "expected a JSON object")
    conversation_id = _required(body, "conversation_id")
    prompt = _required(body, "prompt")
    spec = _required(body, "schedule")
    zone = _field(body, "timezone")
    if await runtime.store.conversation(conversation_id) is None:
        return json_error(404, "no such conversation")
    try:
        created, _new = await runtime.schedules.create(
            conversation_id=conversation_id,
            user=CONSOLE_OPERATOR,
            prompt=prompt,
            spec=spec,
            timezone=zone,
        )
    except ScheduleError as exc:
        return json_error(400, str(exc))
    await runtime.operations.record(
        actor=CONSOLE_OPERATOR,
        action="schedule.create",
        subject=created.id,
        conversation_id=conversation_id,
        detail={"when": runtime.schedules.recurrence(created).describe()},
    )
    return web.json_response({"id": created.id, "status": created.status}, status=201)


@handler
async def change_schedule(request: web.Request) -> web.Response:
    """``{"action": "pause" | "resume" | "delete" | "run_now" | "edit"}``; ``edit`` takes
    ``prompt`` and/or ``schedule`` (with ``timezone``)."""
    runtime = runtime_of(request)
    schedule_id = request.match_info["id"]
    body = await read_json(request)
    action = body.get("action") if isinstance(body, dict) else None
    if action not in ("pause", "resume", "delete", "run_now", "edit"):
        return json_error(400, "'action' must be pause, resume, delete, run_now or edit")
    assert isinstance(body, dict)
    found = await runtime.store.schedule(schedule_id)
    if found is None or found.status == "deleted":
        return json_error(404, f"there is no schedule {schedule_id}")
    if action == "run_now":
        job_ids = await runtime.operations.run_schedule_now(schedule_id, actor=CONSOLE_OPERATOR)
        await runtime.inbound.submit(job_ids)
        return web.json_response({"id": schedule_id, "jobs": job_ids})
    if action == "edit":
        return await _edit(runtime, found, body)
    try:
        # Audited where it happens (as every pause, resume and delete is, from any chat).
        changed = await runtime.schedules.change(schedule_id, action, user=CONSOLE_OPERATOR)
    except (NotAllowedToChange, ScheduleActionError) as exc:
        return json_error(409, str(exc))
    return web.json_response({"id": changed.id, "status": changed.status})


async def _edit(runtime: Runtime, found: ScheduleRecord, body: dict[str, Any]) -> web.Response:
    """A new prompt and/or timetable, checked as a new schedule's (the zone: the one given,
    else the schedule's own)."""
    schedule_id = found.id
    prompt = _field(body, "prompt")
    spec = _field(body, "schedule")
    zone = _field(body, "timezone") or found.timezone
    if prompt is None and spec is None:
        return json_error(400, "an edit changes 'prompt' and/or 'schedule'")
    recurrence: tuple[str, str, str, datetime | None] | None = None
    upcoming = None
    if spec is not None:
        try:
            parsed, upcoming = runtime.schedules.timetable(spec, zone, now=datetime.now(UTC))
        except ScheduleError as exc:
            return json_error(400, str(exc))
        recurrence = (parsed.kind, parsed.spec, parsed.timezone, parsed.anchor)
    changed = await runtime.operations.edit_schedule(
        schedule_id,
        prompt=prompt,
        recurrence=recurrence,
        next_run_at=upcoming,
        actor=CONSOLE_OPERATOR,
    )
    if not changed:
        return json_error(409, f"schedule {schedule_id} is not active or paused")
    return web.json_response({"id": schedule_id, "edited": True})


def add_routes(app: web.Application) -> None:
    """Register the console's page and API."""
    app.router.add_get("/console", page)
    app.router.add_get("/api/console/conversations", conversations)
    app.router.add_get("/api/console/conversations/{id}/messages", conversation_messages)
    app.router.add_get("/api/console/turns", turns)
    app.router.add_get("/api/console/turns/{id}", turn)
    app.router.add_get("/api/console/feedback", feedback)
    app.router.add_get("/api/console/approvals", approvals)
    app.router.add_post("/api/console/approvals/{id}", decide)
    app.router.add_get("/api/console/schedules", schedules)
    app.router.add_post("/api/console/schedules", create_schedule)
    app.router.add_get("/api/console/schedules/{id}/runs", schedule_runs)
    app.router.add_post("/api/console/schedules/{id}", change_schedule)
    app.router.add_get("/api/console/people", console_people.people)
    app.router.add_post("/api/console/pairing/{code}", console_people.pairing)
    app.router.add_post("/api/console/revoke", console_people.revoke)
    app.router.add_get("/api/console/export", console_people.export_person)
    app.router.add_post("/api/console/forget", console_people.forget)
    app.router.add_get("/api/console/usage", console_health.usage)
    app.router.add_get("/api/console/audit", console_health.audit_log)
    app.router.add_get("/api/console/audit.jsonl", console_health.audit_export)
    app.router.add_get("/api/console/health", console_health.health)

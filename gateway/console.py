"""The operator console: ``GET /console`` (a static page) over ``/api/console/...``.

Same door as the web chat (``api.access_middleware``): a token holder, or without a token a
loopback client with no proxy between. Everything here acts as the console's operator
(``console:operator``, an admin), and each change it makes is in the audit log."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import structlog
from aiohttp import web

from adapters.http import json_error
from agent_core.access import CONSOLE_OPERATOR
from agent_core.errors import (
    AlreadyDecided,
    ApprovalNotFound,
    NotAllowedToChange,
    NotAllowedToDecide,
    PairingRefused,
    ScheduleActionError,
)
from agent_core.files.erasure import remove_files
from agent_core.records import ApprovalDecision
from agent_core.scheduling.recurrence import Recurrence, ScheduleError, parse_recurrence
from gateway.inbound import refusal
from gateway.routes import PLATFORM_HEARING, read_json
from gateway.runtime import RUNTIME, Runtime

log = structlog.get_logger("chatgate.console")

STATIC = Path(__file__).with_name("web") / "static"
_DECISIONS: tuple[ApprovalDecision, ...] = ("approve", "allow_conversation", "deny")
_BREAKDOWNS = ("user", "conversation", "platform", "model", "day")
_MAX_QUERY = 200


class _Bad(Exception):
    """A request the console cannot read: a 400 with this message."""


def _int(request: web.Request, name: str, *, default: int | None = None) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _Bad(f"'{name}' must be an integer") from None
    if not 0 <= value < 2**63:
        raise _Bad(f"'{name}' is out of range")
    return value


def _text(request: web.Request, name: str) -> str | None:
    raw = request.query.get(name)
    if raw is None or raw.strip() == "":
        return None
    if len(raw) > _MAX_QUERY or "\x00" in raw:
        raise _Bad(f"'{name}' must be at most {_MAX_QUERY} characters, without NUL")
    return raw.strip()


def _limit(request: web.Request, *, default: int = 50, most: int = 200) -> int:
    value = _int(request, "limit", default=default)
    assert value is not None
    return max(1, min(value, most))


def _handler(fn: Any) -> Any:
    """A route whose bad input is a 400 with a reason."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            response: web.StreamResponse = await fn(request)
        except _Bad as exc:
            return json_error(400, str(exc))
        return response

    wrapped.__name__ = fn.__name__
    wrapped.__doc__ = fn.__doc__
    return wrapped


def _runtime(request: web.Request) -> Runtime:
    return request.app[RUNTIME]


async def page(request: web.Request) -> web.FileResponse:
    """The console page (it holds no data: everything comes from the API)."""
    return web.FileResponse(STATIC / "console.html")


# -- conversations and turns -----------------------------------------------------------------


@_handler
async def conversations(request: web.Request) -> web.Response:
    """Conversations on every platform; ``q`` searches their messages."""
    before = _text(request, "before")
    query = _text(request, "q")
    if before and query and not before.isdigit():
        raise _Bad("'before' must be the 'next' value of the previous page")
    if before and not query:
        at, sep, _id = before.partition("|")
        try:
            datetime.fromisoformat(at)
        except ValueError:
            raise _Bad("'before' must be the 'next' value of the previous page") from None
        if not sep:
            raise _Bad("'before' must be the 'next' value of the previous page")
    found = await _runtime(request).operations.conversations(
        query=query, platform=_text(request, "platform"), before=before, limit=_limit(request)
    )
    return web.json_response(found)


@_handler
async def conversation_messages(request: web.Request) -> web.Response:
    """One conversation's messages, newest first (``before`` a message id)."""
    runtime = _runtime(request)
    conversation = await runtime.store.conversation(request.match_info["id"])
    if conversation is None:
        return json_error(404, "no such conversation")
    items = await runtime.operations.conversation_messages(
        conversation.id, before=_int(request, "before"), limit=_limit(request, default=100)
    )
    return web.json_response({"items": items})


@_handler
async def turns(request: web.Request) -> web.Response:
    """Turns newest first, filtered by conversation, person or status."""
    found = await _runtime(request).operations.turns(
        conversation_id=_text(request, "conversation"),
        user=_text(request, "user"),
        status=_text(request, "status"),
        before=_int(request, "before"),
        limit=_limit(request),
    )
    return web.json_response(found)


@_handler
async def turn(request: web.Request) -> web.Response:
    """One turn's timeline from the journal."""
    try:
        turn_id = int(request.match_info["id"])
    except ValueError:
        return json_error(404, "no such turn")
    found = await _runtime(request).operations.timeline(turn_id) if turn_id < 2**63 else None
    if found is None:
        return json_error(404, "no such turn")
    return web.json_response(found)


# -- approvals -------------------------------------------------------------------------------


@_handler
async def approvals(request: web.Request) -> web.Response:
    """``state=pending`` (the default) or ``decided``."""
    state = request.query.get("state", "pending")
    if state not in ("pending", "decided"):
        raise _Bad("'state' must be pending or decided")
    found = await _runtime(request).operations.approvals(
        pending=state == "pending", before=_text(request, "before"), limit=_limit(request)
    )
    return web.json_response(found)


async def decide(request: web.Request) -> web.Response:
    """Decide a pending approval as the operator: the turn resumes where it waits, and the
    prompt in the chat says who decided."""
    body = await read_json(request)
    decision = body.get("decision") if isinstance(body, dict) else None
    if decision not in _DECISIONS:
        return json_error(400, f"'decision' must be one of {', '.join(_DECISIONS)}")
    runtime = _runtime(request)
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
    except ScheduleError:
        return []
    zone = ZoneInfo(row.timezone)
    times: list[str] = []
    at = row.next_run_at
    while at is not None and len(times) < count:
        times.append(at.astimezone(zone).isoformat())
        at = recurrence.next_after(at)
    return times


@_handler
async def schedules(request: web.Request) -> web.Response:
    """Every schedule with its next five fire times and its latest runs."""
    runtime = _runtime(request)
    rows = await runtime.operations.schedules(include_deleted=request.query.get("deleted") == "1")
    items = []
    for row, targets, runs in rows:
        described = Recurrence.from_stored(row.kind, row.spec, row.timezone, row.anchor)
        items.append(
            {
                "id": row.id,
                "conversation_id": row.conversation_id,
                "platform": row.platform,
                "channel": row.channel,
                "created_by": row.created_by,
                "prompt": row.prompt,
                "when": described.describe(),
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


@_handler
async def schedule_runs(request: web.Request) -> web.Response:
    """One schedule's runs, newest first."""
    runs = await _runtime(request).operations.schedule_runs(
        request.match_info["id"], limit=_limit(request)
    )
    return web.json_response({"items": runs})


def _field(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    return None if value is None else _required(body, name)


def _required(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value.strip() or len(value) > 4000:
        raise _Bad(f"'{name}' must be a non-empty string (at most 4000 characters)")
    return value.strip()


@_handler
async def create_schedule(request: web.Request) -> web.Response:
    """``{"conversation_id", "prompt", "schedule", "timezone"?}``: 201 with the schedule;
    its results go to that conversation."""
    runtime = _runtime(request)
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


@_handler
async def change_schedule(request: web.Request) -> web.Response:
    """``{"action": "pause" | "resume" | "delete" | "run_now" | "edit"}``; ``edit`` takes
    ``prompt`` and/or ``schedule`` (with ``timezone``)."""
    runtime = _runtime(request)
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
        return await _edit(runtime, schedule_id, body)
    try:
        changed = await runtime.schedules.change(schedule_id, action, user=CONSOLE_OPERATOR)
    except (NotAllowedToChange, ScheduleActionError) as exc:
        return json_error(409, str(exc))
    await runtime.operations.record(
        actor=CONSOLE_OPERATOR,
        action=f"schedule.{action}",
        subject=schedule_id,
        conversation_id=found.conversation_id,
    )
    return web.json_response({"id": changed.id, "status": changed.status})


async def _edit(runtime: Runtime, schedule_id: str, body: dict[str, Any]) -> web.Response:
    prompt = _field(body, "prompt")
    spec = _field(body, "schedule")
    zone = _field(body, "timezone")
    if prompt is None and spec is None:
        return json_error(400, "an edit changes 'prompt' and/or 'schedule'")
    recurrence: tuple[str, str, str, datetime | None] | None = None
    upcoming = None
    if spec is not None:
        now = datetime.now(UTC)
        try:
            parsed = parse_recurrence(spec, zone or runtime.schedules.limits.timezone, now=now)
        except ScheduleError as exc:
            return json_error(400, str(exc))
        upcoming = parsed.next_after(now - timedelta(microseconds=1))
        if upcoming is None:
            return json_error(400, f"{parsed.describe()} never fires")
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


# -- people ----------------------------------------------------------------------------------


@_handler
async def people(request: web.Request) -> web.Response:
    """Paired users, pending codes, admins and allow entries, and everyone's usage."""
    runtime = _runtime(request)
    found = await runtime.operations.people()
    settings = runtime.settings
    return web.json_response(
        {
            **found,
            "admins": list(settings.admins),
            "allow": list(settings.allow),
            "access": settings.access,
        }
    )


async def pairing(request: web.Request) -> web.Response:
    """``{"action": "let_in" | "refuse"}`` for a pending code."""
    runtime = _runtime(request)
    body = await read_json(request)
    action = body.get("action") if isinstance(body, dict) else None
    if action not in ("let_in", "refuse"):
        return json_error(400, "'action' must be let_in or refuse")
    code = request.match_info["code"]
    try:
        if action == "let_in":
            done = await runtime.store.approve_pairing(code, actor=CONSOLE_OPERATOR)
        else:
            done = await runtime.operations.refuse_pairing(code, actor=CONSOLE_OPERATOR)
    except PairingRefused as exc:
        return json_error(
            404 if exc.reason == "unknown" else 409, f"code {exc.code} is {exc.reason}"
        )
    return web.json_response({"user": done.user, "code": done.code, "status": done.status})


async def revoke(request: web.Request) -> web.Response:
    """``{"user": ID}``: shut a paired user out again (their approvals are cancelled and
    their schedules paused by the next sweep)."""
    runtime = _runtime(request)
    body = await read_json(request)
    user = body.get("user") if isinstance(body, dict) else None
    if not isinstance(user, str) or not user or len(user) > 255:
        return json_error(400, "'user' must be a user id such as slack:U123")
    if not await runtime.store.revoke_user(user, actor=CONSOLE_OPERATOR):
        return json_error(404, f"{user} is not paired")
    return web.json_response({"user": user, "revoked": True})


@_handler
async def export_person(request: web.Request) -> web.Response:
    """Everything chatgate holds about ``user``, as a file to download."""
    user = _text(request, "user")
    if user is None:
        raise _Bad("'user' is required (a user id such as slack:U123)")
    runtime = _runtime(request)
    document = await runtime.operations.export_person(user)
    await runtime.operations.record(actor=CONSOLE_OPERATOR, action="person.export", subject=user)
    name = "".join(c if c.isalnum() else "-" for c in user)
    return web.Response(
        body=json.dumps(document, ensure_ascii=False, indent=2).encode(),
        headers={
            "Content-Type": "application/json",
            "Content-Disposition": f'attachment; filename="chatgate-{name}.json"',
        },
    )


async def forget(request: web.Request) -> web.Response:
    """``{"user": ID, "confirm": ID}`` (the id typed twice): erase the person's data; 200
    with the receipt (which the audit log keeps)."""
    body = await read_json(request)
    user = body.get("user") if isinstance(body, dict) else None
    if not isinstance(user, str) or not user or len(user) > 255:
        return json_error(400, "'user' must be a user id such as slack:U123")
    assert isinstance(body, dict)
    if body.get("confirm") != user:
        return json_error(400, "'confirm' must repeat the user id: erasure cannot be undone")
    receipt = await forget_person(_runtime(request), user, actor=CONSOLE_OPERATOR)
    return web.json_response(receipt)


async def forget_person(runtime: Runtime, user: str, *, actor: str) -> dict[str, Any]:
    """Erase ``user``'s data, and the files only they had sent."""
    receipt, left = await runtime.operations.forget_person(user, actor=actor)
    try:
        await remove_files(
            blobs=_names(left.get("blobs")),
            uploads=_names(left.get("uploads")),
            conversations=_names(left.get("conversations")),
            store=runtime.files,
            state_dir=runtime.settings.state_dir.resolve(),
        )
    except Exception:
        log.exception("removing an erased person's files failed", user=user)
    log.info("person erased", user=user, actor=actor, messages=receipt.get("messages"))
    return receipt


def _names(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


# -- usage, audit, health --------------------------------------------------------------------


@_handler
async def usage(request: web.Request) -> web.Response:
    """``by`` one of user, conversation, platform, model, day; ``days`` back (default
    30); with the budgets and today's spend against them."""
    runtime = _runtime(request)
    by = request.query.get("by", "day")
    if by not in _BREAKDOWNS:
        raise _Bad(f"'by' must be one of {', '.join(_BREAKDOWNS)}")
    days = _int(request, "days", default=30)
    assert days is not None
    since = (datetime.now(UTC) - timedelta(days=max(0, min(days, 3660)))).strftime("%Y-%m-%d")
    rows = await runtime.operations.usage(by=by, since=since)
    today = await runtime.operations.spend_today()
    settings = runtime.settings
    budgets = {
        "turn_tokens": settings.budget_turn_tokens,
        "conversation_tokens": settings.budget_conversation_tokens,
        "conversation_usd": settings.budget_conversation_usd,
        "user_daily_tokens": settings.budget_user_daily_tokens,
        "user_daily_usd": settings.budget_user_daily_usd,
        "daily_usd": settings.budget_daily_usd,
    }
    return web.json_response(
        {
            "by": by,
            "since": since,
            "items": rows,
            "budgets": budgets,
            "today": today,
            "totals": await runtime.operations.totals(),
        }
    )


@_handler
async def audit_log(request: web.Request) -> web.Response:
    """The audit log, newest first; ``q`` searches it, ``actor`` and ``action`` filter."""
    entries = await _runtime(request).operations.audit(
        query=_text(request, "q"),
        actor=_text(request, "actor"),
        action=_text(request, "action"),
        before=_int(request, "before"),
        limit=_limit(request, default=100, most=500),
    )
    items = [entry.to_json() for entry in entries]
    following = entries[-1].id if entries and len(entries) == _limit(request, default=100) else None
    return web.json_response({"items": items, "next": following})


@_handler
async def audit_export(request: web.Request) -> web.StreamResponse:
    """The whole audit log (or what ``q`` matches) as JSON Lines, oldest first."""
    runtime = _runtime(request)
    query = _text(request, "q")
    response = web.StreamResponse(
        headers={
            "Content-Type": "application/x-ndjson",
            "Content-Disposition": 'attachment; filename="chatgate-audit.jsonl"',
        }
    )
    await response.prepare(request)
    after = 0
    while True:
        entries = await runtime.operations.audit_chunk(query=query, after=after)
        if not entries:
            break
        lines = "".join(json.dumps(e.to_json(), ensure_ascii=False) + "\n" for e in entries)
        await response.write(lines.encode())
        after = entries[-1].id
    await response.write_eof()
    return response


async def health(request: web.Request) -> web.Response:
    """Platforms, the job queue, failures and recoveries, and each process's memory."""
    runtime = _runtime(request)
    depth, oldest = await runtime.store.job_depth()
    hearings = request.app.get(PLATFORM_HEARING, {})
    return web.json_response(
        {
            "platforms": {name: h.snapshot() for name, h in hearings.items()},
            "jobs": {"by_status": depth, "oldest_due_seconds": round(oldest, 1)},
            "turns_in_flight": runtime.supervisor.active,
            "journal": await runtime.operations.health(),
            "processes": _processes(),
            "owner": runtime.owner,
        }
    )


def _rss(pid: int) -> tuple[str, int] | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    name, rss = "?", 0
    for line in status.splitlines():
        if line.startswith("Name:"):
            name = line.split(None, 1)[1].strip()
        elif line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    return name, rss


def _processes() -> list[dict[str, Any]]:
    """This gateway and the processes it started (``chatgate run``'s worker and beat), with
    their resident memory (Linux ``/proc``; elsewhere, this process only)."""
    me = os.getpid()
    found = []
    mine = _rss(me)
    if mine is None:
        import resource

        return [{"pid": me, "name": "chatgate", "rss_bytes": resource.getrusage(0).ru_maxrss}]
    found.append({"pid": me, "name": mine[0], "rss_bytes": mine[1], "role": "gateway"})
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == me:
            child = _rss(int(entry.name))
            if child is not None:
                found.append(
                    {
                        "pid": int(entry.name),
                        "name": child[0],
                        "rss_bytes": child[1],
                        "role": "child",
                    }
                )
    return found


def add_routes(app: web.Application) -> None:
    """Register the console's page and API."""
    app.router.add_get("/console", page)
    app.router.add_get("/api/console/conversations", conversations)
    app.router.add_get("/api/console/conversations/{id}/messages", conversation_messages)
    app.router.add_get("/api/console/turns", turns)
    app.router.add_get("/api/console/turns/{id}", turn)
    app.router.add_get("/api/console/approvals", approvals)
    app.router.add_post("/api/console/approvals/{id}", decide)
    app.router.add_get("/api/console/schedules", schedules)
    app.router.add_post("/api/console/schedules", create_schedule)
    app.router.add_get("/api/console/schedules/{id}/runs", schedule_runs)
    app.router.add_post("/api/console/schedules/{id}", change_schedule)
    app.router.add_get("/api/console/people", people)
    app.router.add_post("/api/console/pairing/{code}", pairing)
    app.router.add_post("/api/console/revoke", revoke)
    app.router.add_get("/api/console/export", export_person)
    app.router.add_post("/api/console/forget", forget)
    app.router.add_get("/api/console/usage", usage)
    app.router.add_get("/api/console/audit", audit_log)
    app.router.add_get("/api/console/audit.jsonl", audit_export)
    app.router.add_get("/api/console/health", health)

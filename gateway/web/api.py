"""The web chat: its page and JSON API (CONTRACT.md, "HTTP routes")."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import BodyPartReader, web

from adapters.base import AdapterError, BadRequest, Forbidden, Hearing, Unauthorized
from adapters.http import json_error
from adapters.web.auth import (
    SESSION_COOKIE,
    check_local,
    check_same_origin,
    check_token,
    session_value,
)
from adapters.web.parse import (
    parse_answer,
    parse_choice,
    parse_decision,
    parse_message,
    parse_schedule_action,
)
from adapters.web.render import approval_item, conversation_item, message_item, rateable
from adapters.web.send import WEB_FILE, Draft
from adapters.web.uploads import UploadTooLarge
from agent_core import forget_me
from agent_core.errors import (
    AlreadyDecided,
    ApprovalNotFound,
    NotAllowedToChange,
    NotAllowedToDecide,
    PairingRefused,
    ScheduleNotFound,
)
from agent_core.events import utcnow
from agent_core.journaled import Choices, item_json
from agent_core.records import ApprovalDecision, ApprovalRecord, ConversationRecord
from gateway.console_people import forget_person
from gateway.inbound import Inbound, refusal
from gateway.routes import PLATFORM_HEARING, Handler, read_json
from gateway.runtime import RUNTIME

STATIC = Path(__file__).with_name("static")
_KEEPALIVE_SECONDS = 15.0
_POLL_SECONDS = 1.0


_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; "
        "object-src 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@web.middleware
async def headers_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every response: not to be framed, not to be sniffed, no referrer."""
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        exc.headers.update(_SECURITY_HEADERS)
        raise
    if not response.prepared:
        response.headers.update(_SECURITY_HEADERS)
    return response


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        return header.removeprefix("Bearer ").strip()
    return None


@web.middleware
async def access_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Without a token: loopback clients naming this machine, with no proxy between. With
    one: the page and its files for anyone (they hold no data), the API for the token
    holder (a bearer header, or the cookie ``POST /api/session`` sets). Writes must be JSON
    from the page's own origin (no cross-site form posts). A trigger's routes answer to
    its own secret (``gateway.trigger_routes``), from anywhere, with any body."""
    if request.path.startswith("/api/triggers/"):
        return await handler(request)
    if request.path in ("/", "/console") or request.path.startswith(("/api/", "/static/")):
        secret = request.app[RUNTIME].settings.web_token
        console = request.path == "/console" or request.path.startswith("/api/console/")
        try:
            if secret is None:
                check_local(remote=request.remote, host=request.host, headers=request.headers)
                if console:
                    hearing: dict[str, Hearing] = request.app.get(PLATFORM_HEARING, {})
                    held = await _platforms_held(request.app)
                    check_console_without_token([*hearing, *held])
            elif request.path.startswith("/api/") and request.path != "/api/session":
                check_token(
                    bearer=_bearer(request),
                    cookie=request.cookies.get(SESSION_COOKIE),
                    token=secret.get_secret_value(),
                )
            if console:
                check_same_site(request.headers.get("Sec-Fetch-Site"))
            if request.method in ("POST", "DELETE"):
                check_same_origin(origin=request.headers.get("Origin"), host=request.host)
        except Unauthorized as exc:
            return json_error(401, str(exc))
        except Forbidden as exc:
            return json_error(403, str(exc))
        if request.path == "/api/uploads":
            # A form may post multipart from any site; a custom header it cannot send
            # (without the preflight this server never answers) keeps uploads same-site.
            if request.headers.get(UPLOAD_HEADER) != "1":
                return json_error(403, f"an upload needs the {UPLOAD_HEADER}: 1 header")
            if request.content_type != "multipart/form-data":
                return json_error(415, "send the file as multipart/form-data")
        elif request.method == "POST" and request.content_type != "application/json":
            return json_error(415, "send the body as application/json")
    return await handler(request)


_HELD = web.AppKey("platforms_held", list[Any])
_HELD_SECONDS = 30.0


async def _platforms_held(app: web.Application) -> list[str]:
    """The platforms the database has conversations of (read at most every 30 s): a
    gateway that serves only the web chat still holds what others received."""
    cached = app[_HELD]  # [read at, platforms]: made at setup, changed in place
    now = time.monotonic()
    if not cached or now - cached[0] > _HELD_SECONDS:
        cached[:] = [now, await app[RUNTIME].operations.platforms()]
    held: list[str] = cached[1]
    return held


def check_console_without_token(platforms: Collection[str]) -> None:
    """Without a token the console answers loopback clients only while the web chat is the
    only platform: it acts as an admin on every platform, and whoever is on this machine
    (another user, a local service, a command the agent runs with the network on) must not
    be able to read Slack, Telegram or Discord conversations, decide their approvals or
    erase their people without the token."""
    others = sorted({name for name in platforms if name != "web"})
    if others:
        raise Forbidden(
            f"the console needs CHATGATE_WEB_TOKEN while {', '.join(others)} is configured "
            "or has conversations here"
        )


def check_same_site(fetch_site: str | None) -> None:
    """A browser says where a request comes from (``Sec-Fetch-Site``): the console answers
    its own page (and typed addresses), never another site's, not even a GET (an export
    writes to the audit log)."""
    if fetch_site in ("cross-site", "same-site"):
        raise Forbidden("the console answers its own page only")


async def sign_in(request: web.Request) -> web.Response:
    """``{"token": TOKEN}``: 204 with an HttpOnly, SameSite=Strict session cookie, so the
    page never carries the token in a URL; 401 for a wrong token."""
    secret = request.app[RUNTIME].settings.web_token
    if secret is None:
        return json_error(404, "no CHATGATE_WEB_TOKEN is set: the web chat needs no sign-in")
    body = await read_json(request)
    presented = body.get("token") if isinstance(body, dict) else None
    if not isinstance(presented, str):
        return json_error(400, 'expected {"token": "..."}')
    try:
        check_token(bearer=presented, cookie=None, token=secret.get_secret_value())
    except Unauthorized as exc:
        return json_error(401, str(exc))
    response = web.Response(status=204)
    response.set_cookie(
        SESSION_COOKIE,
        session_value(secret.get_secret_value()),
        httponly=True,
        samesite="Strict",
        secure=request.secure,
        path="/",
    )
    return response


async def sign_out(request: web.Request) -> web.Response:
    """Forget the session cookie."""
    response = web.Response(status=204)
    response.del_cookie(SESSION_COOKIE, path="/")
    return response


async def index(request: web.Request) -> web.FileResponse:
    """The chat page."""
    return web.FileResponse(STATIC / "index.html")


async def post_message(request: web.Request) -> web.Response:
    """Accept a message; 202 once it is stored (the reply follows on the stream)."""
    runtime = request.app[RUNTIME]
    if runtime.stopping.is_set() or runtime.supervisor.closing:
        return json_error(503, "shutting down; retry shortly", retry_after=1)
    body = await read_json(request)
    try:
        event = parse_message(body)
    except BadRequest as exc:
        runtime.inbound.reject("web")
        return json_error(400, str(exc))
    accepted = await runtime.inbound.accept(event)
    return web.json_response(
        {
            "conversation_id": accepted.conversation_id,
            "message_id": accepted.message_id,
            "turn_id": accepted.turn_id,
            "duplicate": accepted.duplicate,
        },
        status=202,
    )


UPLOAD_HEADER = "X-Chatgate-Upload"


async def upload(request: web.Request) -> web.Response:
    """One file (multipart field ``file``), streamed to the state directory: 201 with the
    id a message names it by; 413 past ``CHATGATE_FILE_MAX_MB`` (nothing is kept)."""
    runtime = request.app[RUNTIME]
    limit = int(runtime.settings.file_max_mb * 1024 * 1024)
    if request.content_length is not None and request.content_length > limit + 64 * 1024:
        return json_error(413, f"files are read up to {runtime.settings.file_max_mb:g} MB")
    try:
        reader = await request.multipart()
        part = await reader.next()
    except (ValueError, AssertionError, KeyError) as exc:
        return json_error(400, f"expected a multipart/form-data body: {exc}")
    if not isinstance(part, BodyPartReader) or part.name != "file":
        return json_error(400, "expected one multipart field named 'file'")
    name = (part.filename or "file")[:255]
    try:
        upload_id, size = await runtime.uploads.save(part, limit=limit)
    except UploadTooLarge:
        return json_error(413, f"files are read up to {runtime.settings.file_max_mb:g} MB")
    return web.json_response({"id": upload_id, "name": name, "size": size}, status=201)


# Types a browser may show from this origin; anything else is only ever downloaded (an
# HTML file the agent made must not run as this page's own).
_SHOWN_INLINE = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


async def sent_file(request: web.Request) -> web.StreamResponse:
    """A file the agent sent in a web conversation (``send_file``), by its note's id."""
    runtime = request.app[RUNTIME]
    try:
        message_id = int(request.match_info["id"])
    except ValueError:
        return json_error(404, "no such file")
    message = await runtime.store.message(message_id)
    sent = message.payload.get("file") if message and isinstance(message.payload, dict) else None
    receipt = str(sent.get("receipt", "")) if isinstance(sent, dict) else ""
    conversation = await runtime.store.conversation(message.conversation_id) if message else None
    if (
        not receipt.startswith(WEB_FILE)
        or conversation is None
        or conversation.key.platform != "web"
    ):
        return json_error(404, "no such file")
    assert isinstance(sent, dict)
    try:
        data = await runtime.files.read(receipt[len(WEB_FILE) :])
    except (FileNotFoundError, ValueError):
        return json_error(410, "the file is no longer kept")
    content_type = str(sent.get("content_type") or "")
    shown = content_type in _SHOWN_INLINE
    name = re.sub(r"[^A-Za-z0-9._ -]", "_", str(sent.get("name") or "file"))
    return web.Response(
        body=data,
        headers={
            "Content-Type": content_type if shown else "application/octet-stream",
            "Content-Disposition": f'{"inline" if shown else "attachment"}; filename="{name}"',
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "sandbox; default-src 'none'",
        },
    )


async def decide(request: web.Request) -> web.Response:
    """Approve, allow in this conversation, or deny: 200 with the new status; 409 when
    someone decided first; 403 when this user may not decide it."""

    async def act(
        inbound: Inbound, approval_id: str, decision: ApprovalDecision, user: str
    ) -> ApprovalRecord:
        return await inbound.decide(approval_id, decision=decision, user=user)

    return await _pressed(request, parse_decision, act, missing="no such approval", late="decided")


async def answer_question(request: web.Request) -> web.Response:
    """A press of an ``ask_user`` question's button: ``{"choice": INDEX | "other"}``; 200
    with the question (answered, or waiting for the typed answer after "Other"); 404 no
    such question or option; 403 it asks someone else; 409 answered already."""

    async def act(inbound: Inbound, approval_id: str, choice: str, user: str) -> ApprovalRecord:
        return await inbound.answer(approval_id, choice=choice, user=user)

    return await _pressed(
        request, parse_answer, act, missing="no such question or option", late="answered"
    )


# What a press carries: a decision, or a question's choice.
_Pressed = TypeVar("_Pressed", bound=str)


async def _pressed(
    request: web.Request,
    parse: Callable[[object], tuple[_Pressed, str]],
    act: Callable[[Inbound, str, _Pressed, str], Awaitable[ApprovalRecord]],
    *,
    missing: str,
    late: str,
) -> web.Response:
    """A press on an approval's or a question's card: the body parsed (400), the press
    acted on; 404 ``missing``, 403 with the refusal, 409 (``late``) with where it stands."""
    runtime = request.app[RUNTIME]
    body = await read_json(request)
    try:
        value, user = parse(body)
    except BadRequest as exc:
        return json_error(400, str(exc))
    approval_id = request.match_info["id"]
    try:
        done = await act(runtime.inbound, approval_id, value, user)
    except ApprovalNotFound:
        return json_error(404, missing)
    except NotAllowedToDecide as exc:
        return json_error(403, refusal(exc))
    except AlreadyDecided:
        current = await runtime.store.approval(approval_id)
        extra = approval_item(current) if current else {}
        return json_error(409, f"already {late}", approval=extra)
    return web.json_response(approval_item(done))


async def change_schedule(request: web.Request) -> web.Response:
    """Pause, resume or delete a schedule from a ``jobs`` listing's buttons: 200 with the
    schedule's new state; 404 unknown (or not this conversation's); 403 not allowed."""
    runtime = request.app[RUNTIME]
    body = await read_json(request)
    try:
        action, user, message_id = parse_schedule_action(body)
    except BadRequest as exc:
        return json_error(400, str(exc))
    schedule_id = request.match_info["id"]
    found = await runtime.store.schedule(schedule_id)
    if found is None or found.status == "deleted":
        return json_error(404, f"there is no schedule {schedule_id}")
    try:
        changed = await runtime.inbound.change_schedule(
            schedule_id, action, user=user, conversation_id=found.conversation_id
        )
    except NotAllowedToChange as exc:
        return json_error(403, str(exc))
    except ScheduleNotFound as exc:
        return json_error(404, str(exc))
    if message_id is not None:
        await runtime.commands.refresh_listing(message_id)
    return web.json_response(item_json(runtime.commands.schedule_item(changed)))


async def answer_choice(request: web.Request) -> web.Response:
    """A press of a question's button (``forget me``'s confirmation) in a web
    conversation: ``{"value": V, "user": USER?}``; 200 with the text that replaces the
    question; 403 when this user may not answer it; 404 when there is no such question."""
    runtime = request.app[RUNTIME]
    body = await read_json(request)
    try:
        value, user = parse_choice(body)
    except BadRequest as exc:
        return json_error(400, str(exc))
    try:
        message_id = int(request.match_info["id"])
    except ValueError:
        return json_error(404, "no such question")
    message = await runtime.store.message(message_id) if message_id < 2**63 else None
    asked = (
        Choices.from_payload(message.payload)
        if message and isinstance(message.payload, dict)
        else None
    )
    conversation = await runtime.store.conversation(message.conversation_id) if message else None
    if (
        message is None
        or asked is None
        or conversation is None
        or conversation.key.platform != "web"
        or value not in {choice.value for choice in asked.choices}
    ):
        return json_error(404, "no such question")
    meant = forget_me.answer(value, user=user, now=utcnow())
    if meant not in ("erase", "keep"):
        return json_error(403, meant)
    if meant == "keep":
        text = "Kept: nothing was erased."
    else:
        text = forget_me.receipt_text(await forget_person(runtime, user, actor=user))
    await runtime.store.rewrite_note(message_id, text, None)
    runtime.hub.publish(conversation.key)
    return web.json_response({"text": text})


async def pairing_state(request: web.Request) -> web.Response:
    """Pending pairing codes and paired users (the web user is the local admin)."""
    pending, paired = await request.app[RUNTIME].store.pairing_listing()
    return web.json_response(
        {
            "pending": [
                {
                    "code": p.code,
                    "user": p.user,
                    "platform": p.platform,
                    "created_at": p.created_at.isoformat(),
                    "expires_at": p.expires_at.isoformat(),
                }
                for p in pending
            ],
            "paired": [
                {
                    "user": u.user,
                    "approved_by": u.approved_by,
                    "approved_at": u.approved_at.isoformat(),
                }
                for u in paired
            ],
        }
    )


async def pairing_approve(request: web.Request) -> web.Response:
    """Let the stranger holding this code in: 200; 404 unknown code; 409 expired or used."""
    body = await read_json(request)
    user = body.get("user", "local") if isinstance(body, dict) else "local"
    if not isinstance(user, str) or not user:
        return json_error(400, "'user' must be a string")
    try:
        approved = await request.app[RUNTIME].store.approve_pairing(
            request.match_info["code"], actor=f"web:{user}"
        )
    except PairingRefused as exc:
        status = 404 if exc.reason == "unknown" else 409
        return json_error(status, f"code {exc.code} is {exc.reason}")
    return web.json_response({"user": approved.user, "code": approved.code})


async def list_conversations(request: web.Request) -> web.Response:
    """The web conversations, most recently active first."""
    store = request.app[RUNTIME].store
    items = [conversation_item(c) for c in await store.list_conversations(platform="web")]
    return web.json_response(items)


def _after(request: web.Request) -> int:
    raw = request.headers.get("Last-Event-ID") or request.query.get("after") or "0"
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest("'after' must be a message id (an integer)") from None
    if not 0 <= value < 2**63:
        raise BadRequest("'after' must be a message id (0 to 2**63-1)")
    return value


async def _conversation_and_after(request: web.Request) -> tuple[ConversationRecord, int]:
    """The conversation in the path and the message id to start after; 404 / 400 if bad.

    Without a token the API reads web conversations only: a Slack, Telegram or Discord
    conversation is the token holder's (the operator's) to read."""
    runtime = request.app[RUNTIME]
    conversation = await runtime.store.conversation(request.match_info["id"])
    if conversation is None or (
        runtime.settings.web_token is None and conversation.key.platform != "web"
    ):
        raise web.HTTPNotFound(reason="no such conversation")
    try:
        return conversation, _after(request)
    except AdapterError as exc:
        raise web.HTTPBadRequest(reason=str(exc)) from None


async def get_messages(request: web.Request) -> web.Response:
    """A conversation's messages in order (``?after=ID`` for the ones after a message)."""
    conversation, after = await _conversation_and_after(request)
    store = request.app[RUNTIME].store
    items = await store.messages_after(conversation.id, after_id=after)
    ratings = await store.ratings_of([m.id for m in items if rateable(m)])
    return web.json_response(
        {
            "conversation": conversation_item(conversation),
            "items": [message_item(m, ratings) for m in items],
            # Turns still to run or finish (not those waiting for a person): 0 once every
            # message so far has its answer delivered.
            "open_turns": await store.open_turn_count(conversation.id),
        }
    )


async def stream(request: web.Request) -> web.StreamResponse:
    """Server-sent events: every message after ``Last-Event-ID`` / ``?after``, as it lands."""
    runtime = request.app[RUNTIME]
    conversation, after = await _conversation_and_after(request)
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    await response.write(b"retry: 1000\n\n")
    last_write = time.monotonic()
    shown = 0  # the version of the draft the page shows; 0 for none
    try:
        with runtime.hub.watching(conversation.key) as changed:
            while not runtime.stopping.is_set():
                changed.clear()
                items = await runtime.store.messages_after(conversation.id, after_id=after)
                rated = [m.id for m in items if rateable(m)]
                ratings = await runtime.store.ratings_of(rated) if rated else {}
                for item in items:
                    data = json.dumps(message_item(item, ratings))
                    await response.write(
                        f"id: {item.id}\nevent: message\ndata: {data}\n\n".encode()
                    )
                    after = item.id
                    last_write = time.monotonic()
                draft = runtime.hub.draft(conversation.key)
                if (draft.version if draft is not None else 0) != shown:
                    await response.write(_draft_event(draft))
                    shown = draft.version if draft is not None else 0
                    last_write = time.monotonic()
                if time.monotonic() - last_write > _KEEPALIVE_SECONDS:
                    await response.write(b": keepalive\n\n")
                    last_write = time.monotonic()
                # Woken at once by this process; the timeout catches other processes' writes.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_POLL_SECONDS):
                        await changed.wait()
    except ConnectionResetError:
        pass
    return response


def _draft_event(draft: Draft | None) -> bytes:
    """The reply being written, as the page shows it (``null`` once it is over)."""
    data = {"text": draft.text, "status": draft.status} if draft is not None else None
    return f"event: draft\ndata: {json.dumps(data)}\n\n".encode()


async def _secure_streamed(request: web.Request, response: web.StreamResponse) -> None:
    """A response its handler sends itself (a stream, an export) is prepared before the
    middleware sees it: it gets the same headers here."""
    for name, value in _SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)


def add_routes(app: web.Application) -> None:
    """Register the page, its assets and the JSON API."""
    app.on_response_prepare.append(_secure_streamed)
    app[_HELD] = []
    app.router.add_get("/", index)
    app.router.add_post("/api/session", sign_in)
    app.router.add_delete("/api/session", sign_out)
    app.router.add_static("/static", STATIC)
    app.router.add_post("/api/messages", post_message)
    app.router.add_post("/api/uploads", upload)
    app.router.add_get("/api/files/{id}", sent_file)
    app.router.add_post("/api/approvals/{id}", decide)
    app.router.add_post("/api/questions/{id}", answer_question)
    app.router.add_post("/api/schedules/{id}", change_schedule)
    app.router.add_post("/api/choices/{id}", answer_choice)
    app.router.add_get("/api/pairing", pairing_state)
    app.router.add_post("/api/pairing/{code}", pairing_approve)
    app.router.add_get("/api/conversations", list_conversations)
    app.router.add_get("/api/conversations/{id}/messages", get_messages)
    app.router.add_get("/api/conversations/{id}/stream", stream)

"""The console's people: who is let in, pending pairing codes (let in, refuse), revoking,
and a person's data (export, erase)."""

from __future__ import annotations

import json
from typing import Any

import structlog
from aiohttp import web

from adapters.http import json_error
from agent_core.access import CONSOLE_OPERATOR
from agent_core.errors import PairingRefused
from agent_core.files.erasure import remove_files
from gateway.console_query import Bad, handler, query_text, runtime_of
from gateway.routes import read_json
from gateway.runtime import Runtime

log = structlog.get_logger("chatgate.console")


@handler
async def people(request: web.Request) -> web.Response:
    """Paired users, pending codes, admins and allow entries, and everyone's usage."""
    runtime = runtime_of(request)
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
    runtime = runtime_of(request)
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
    runtime = runtime_of(request)
    body = await read_json(request)
    user = body.get("user") if isinstance(body, dict) else None
    if not isinstance(user, str) or not user or len(user) > 255:
        return json_error(400, "'user' must be a user id such as slack:U123")
    if not await runtime.store.revoke_user(user, actor=CONSOLE_OPERATOR):
        return json_error(404, f"{user} is not paired")
    return web.json_response({"user": user, "revoked": True})


@handler
async def export_person(request: web.Request) -> web.Response:
    """Everything chatgate holds about ``user``, as a file to download."""
    user = query_text(request, "user")
    if user is None:
        raise Bad("'user' is required (a user id such as slack:U123)")
    runtime = runtime_of(request)
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
    receipt = await forget_person(runtime_of(request), user, actor=CONSOLE_OPERATOR)
    return web.json_response(receipt)


async def forget_person(runtime: Runtime, user: str, *, actor: str) -> dict[str, Any]:
    """Erase ``user``'s data, and the files only they had sent."""
    receipt, left = await runtime.operations.forget_person(
        user, actor=actor, stop_here=lambda turn_id: runtime.runner.stop(turn_id, by=actor)
    )
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

"""``POST /api/triggers/{id}``: fire a trigger; ``GET /api/triggers/{id}/fires/{fire}``: a
fire's receipt.

The only routes under ``/api/`` outside the web chat's token: a trigger's own secret
authenticates them (see ``agent_core.triggers``), so a CI job or a monitoring system can
call them from anywhere the gateway is reachable. An unknown trigger and a wrong secret
get the same 401, so the answer tells nothing about which ids exist. A body over
``trigger_max_bytes`` gets 413 before it is read; nothing is queued for any refusal.
"""

from __future__ import annotations

import asyncio
import re
import time

import structlog
from aiohttp import web
from pydantic import JsonValue

from adapters.http import json_error
from agent_core.errors import TriggerNotFound, TriggerPaused, TriggerRateLimited
from agent_core.records import FireRecord
from agent_core.triggers import BadFire, BodyTooLarge, Proof, signed
from gateway.runtime import RUNTIME

log = structlog.get_logger("chatgate.triggers")

UNAUTHORIZED = (
    "unknown trigger, or the request does not prove its secret (Authorization: Bearer "
    "SECRET, or X-Chatgate-Timestamp and X-Chatgate-Signature: sha256=HMAC of TIMESTAMP.BODY)"
)
_CHUNK = 64 * 1024
# A body slower than this is dropped (408): nobody holds a connection open by trickling.
READ_SECONDS = 30.0
_FIRE_ID = re.compile(r"[0-9]{1,18}")


async def fire(request: web.Request) -> web.Response:
    """Queue the trigger's turn: 202 with the fire's receipt (200 for a repeated
    Idempotency-Key, or a signed request sent again); 401, 400, 408 (too slow), 409
    (paused), 413 or 429 (``Retry-After``) otherwise."""
    triggers = request.app[RUNTIME].triggers
    cap = triggers.max_bytes
    if request.content_length is not None and request.content_length > cap:
        return _too_large(cap)
    try:
        async with asyncio.timeout(READ_SECONDS):
            body = await _read(request, cap)
    except TimeoutError:
        return json_error(408, f"the body did not arrive within {READ_SECONDS:g} s")
    if body is None:
        return _too_large(cap)
    trigger_id = request.match_info["trigger_id"]
    proof = await _authenticated(request, trigger_id, body)
    if proof is None:
        return json_error(401, UNAUTHORIZED)
    # A signed request is its own key: resent as it is (a retry, a replay), the same fire.
    key = request.headers.get("Idempotency-Key") if proof.kind == "bearer" else proof.digest
    try:
        fired = await triggers.fire(trigger_id, body, key=key, source="http")
    except BodyTooLarge:
        return _too_large(cap)
    except BadFire as exc:
        return json_error(400, str(exc))
    except TriggerNotFound:
        return json_error(401, UNAUTHORIZED)  # deleted between the check and the fire
    except TriggerPaused as exc:
        return json_error(409, str(exc))
    except TriggerRateLimited as exc:
        response = json_error(429, str(exc))
        response.headers["Retry-After"] = str(int(exc.retry_after + 0.999))
        return response
    log.info(
        "trigger fired",
        trigger_id=trigger_id,
        fire_id=fired.fire.id,
        job_id=fired.fire.job_id,
        duplicate=fired.duplicate,
        bytes=len(body),
    )
    body_json = {**_fire_json(trigger_id, fired.fire), "duplicate": fired.duplicate}
    return web.json_response(body_json, status=200 if fired.duplicate else 202)


async def receipt(request: web.Request) -> web.Response:
    """A fire's state and receipt, for the trigger's secret holder (a bearer token: a
    signature over nothing would be a lasting credential)."""
    trigger_id = request.match_info["trigger_id"]
    proof = await _authenticated(request, trigger_id, b"")
    if proof is None or proof.kind != "bearer":
        return json_error(401, "unknown trigger, or no Authorization: Bearer SECRET")
    shown = request.match_info["fire_id"]
    if not _FIRE_ID.fullmatch(shown):
        return json_error(400, "the fire id is a number")
    fire_id = int(shown)
    found = await request.app[RUNTIME].triggers.receipt(trigger_id, fire_id)
    if found is None:
        return json_error(404, f"trigger {trigger_id} has no fire {fire_id}")
    return web.json_response(_fire_json(trigger_id, found))


async def _authenticated(request: web.Request, trigger_id: str, body: bytes) -> Proof | None:
    try:
        _trigger, secret = await request.app[RUNTIME].triggers.check(trigger_id)
    except TriggerNotFound:
        return None
    headers = request.headers
    proof = signed(
        secret,
        authorization=headers.get("Authorization"),
        signature=headers.get("X-Chatgate-Signature"),
        timestamp=headers.get("X-Chatgate-Timestamp"),
        body=body,
        now=time.time(),
    )
    if proof is None:
        log.warning("trigger request refused: no proof of the secret", trigger_id=trigger_id)
    return proof


async def _read(request: web.Request, cap: int) -> bytes | None:
    """The body, or None as soon as it passes ``cap`` bytes (a chunked body says no
    length up front)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(_CHUNK):
        size += len(chunk)
        if size > cap:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(cap: int) -> web.Response:
    return json_error(413, f"body larger than {cap} bytes (setting CHATGATE_TRIGGER_MAX_BYTES)")


def _fire_json(trigger_id: str, fire: FireRecord) -> dict[str, JsonValue]:
    return {
        "trigger": trigger_id,
        "fire": fire.id,
        "job": fire.job_id,
        "turn": fire.turn_id,
        "status": fire.status,
        "receipt": fire.receipt,
        "error": fire.error,
        "received_at": fire.received_at.isoformat(),
        "url": f"/api/triggers/{trigger_id}/fires/{fire.id}",
    }


def add_routes(app: web.Application) -> None:
    """Register the trigger routes."""
    app.router.add_post("/api/triggers/{trigger_id}", fire)
    app.router.add_get("/api/triggers/{trigger_id}/fires/{fire_id}", receipt)

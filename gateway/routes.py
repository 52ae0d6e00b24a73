"""Health, readiness, metrics, and the HTTP plumbing every route shares."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from adapters.base import BadRequest, Hearing
from adapters.http import MAX_BODY, json_error
from adapters.payloads import load_json, same_secret
from agent_core.errors import StorageError
from gateway.runtime import RUNTIME

log = structlog.get_logger("chatgate.http")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def read_json(request: web.Request) -> object:
    """The request's JSON body; 413 over 1 MiB, 400 when it is not JSON."""
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_BODY, actual_size=request.content_length)
    raw = await request.read()
    try:
        return load_json(raw)
    except BadRequest as exc:
        raise web.HTTPBadRequest(
            text=json.dumps({"error": str(exc)}), content_type="application/json"
        ) from None


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """JSON bodies for HTTP errors; an unexpected exception is logged and becomes a 500."""
    try:
        return await handler(request)
    except web.HTTPRequestEntityTooLarge:
        return json_error(413, f"body larger than {MAX_BODY} bytes")
    except (HttpProcessingError, RequestPayloadError):
        # The body could not be read as sent (a Content-Encoding it does not match).
        return json_error(400, "body could not be read (does it match its Content-Encoding?)")
    except web.HTTPException as exc:
        if exc.status >= 400 and exc.content_type != "application/json":
            return json_error(exc.status, exc.reason)
        raise
    except ConnectionResetError:
        raise  # the client left: nothing to answer
    except Exception:
        log.exception("unhandled error", path=request.path, method=request.method)
        return json_error(500, "internal error; the details are in the gateway log")


async def healthz(request: web.Request) -> web.Response:
    """200 while the process lives."""
    return web.json_response({"ok": True})


PLATFORM_CHECKS = web.AppKey("platform_checks", list[Callable[[], str | None]])
"""Each configured platform's readiness: None when connected, else why not."""
PLATFORM_HEARING = web.AppKey("platform_hearing", dict[str, Hearing])
"""Each configured platform's inbound side (connection, last event, deaf since)."""


def add_platform_check(app: web.Application, check: Callable[[], str | None]) -> None:
    """Make ``/readyz`` answer 503 with ``check()``'s reason while it returns one."""
    app.setdefault(PLATFORM_CHECKS, []).append(check)


async def readyz(request: web.Request) -> web.Response:
    """200 when the database answers and the gateway takes work; 503 with the reason."""
    runtime = request.app[RUNTIME]
    if runtime.stopping.is_set() or runtime.supervisor.closing:
        return web.json_response({"ready": False, "reason": "draining"}, status=503)
    try:
        async with asyncio.timeout(2):
            await runtime.store.ping()
    except (TimeoutError, StorageError) as exc:
        # Named, not described: the driver's message can carry a host, a user or worse.
        # The log has it.
        log.warning("readiness: the database does not answer", error=str(exc) or "timed out")
        reason = "database: timed out" if isinstance(exc, TimeoutError) else "database: down"
        return web.json_response({"ready": False, "reason": reason}, status=503)
    # When and how each platform was last heard from is for operators: with a metrics
    # token set, for requests that carry it (as /metrics is).
    platforms = (
        {
            name: hearing.snapshot()
            for name, hearing in request.app.get(PLATFORM_HEARING, {}).items()
            if name != "web"
        }
        if _operator(request)
        else {}
    )
    # Deaf platforms are named, not made a 503: the gateway still serves the others,
    # and taking every gateway out of service would not bring a platform back.
    deaf = sorted(
        name
        for name, hearing in request.app.get(PLATFORM_HEARING, {}).items()
        if hearing.deaf_since is not None
    )
    for check in request.app.get(PLATFORM_CHECKS, ()):
        problem = check()
        if problem is not None:
            body = {"ready": False, "reason": problem, "deaf": deaf, "platforms": platforms}
            return web.json_response(body, status=503)
    return web.json_response({"ready": True, "deaf": deaf, "platforms": platforms})


def _operator(request: web.Request) -> bool:
    """Anyone when no ``CHATGATE_METRICS_TOKEN`` is set, else who presents it."""
    token = request.app[RUNTIME].settings.metrics_token
    if token is None:
        return True
    presented = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    return same_secret(presented, token.get_secret_value())


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text format; with ``CHATGATE_METRICS_TOKEN`` set, for
    ``Authorization: Bearer TOKEN`` only (401 otherwise)."""
    runtime = request.app[RUNTIME]
    if not _operator(request):
        return json_error(401, "GET /metrics needs Authorization: Bearer CHATGATE_METRICS_TOKEN")
    try:
        async with asyncio.timeout(2):
            runtime.metrics.jobs_seen(*await runtime.store.job_depth())
            metrics = runtime.metrics
            metrics.runs_started(await runtime.store.runs_started_since(metrics.lag_since))
    except (TimeoutError, StorageError):
        pass  # the other metrics still answer
    hearings: dict[str, Hearing] = request.app.get(PLATFORM_HEARING, {})
    runtime.metrics.platforms_seen(hearings)
    body = runtime.metrics.render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})


def add_routes(app: web.Application) -> None:
    """Register the operational routes."""
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)

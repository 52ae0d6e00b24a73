"""What every webhook route shares: the body limit and JSON error bodies."""

from __future__ import annotations

from typing import Any

from aiohttp import web

MAX_BODY = 1024 * 1024


def json_error(status: int, message: str, **extra: Any) -> web.Response:
    """A JSON error body: ``{"error": message, ...}``."""
    return web.json_response({"error": message, **extra}, status=status)


def too_large(request: web.Request) -> web.Response | None:
    """413 when the request says its body is over :data:`MAX_BODY` (aiohttp refuses a
    longer body while it reads it)."""
    if request.content_length is not None and request.content_length > MAX_BODY:
        return json_error(413, f"body larger than {MAX_BODY} bytes")
    return None

"""The console API's shared reading of requests: query parameters that are a 400 when
bad, never a 500."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from adapters.http import json_error
from gateway.runtime import RUNTIME, Runtime

_MAX_QUERY = 200


class Bad(Exception):
    """A request the console cannot read: a 400 with this message."""


def query_int(request: web.Request, name: str, *, default: int | None = None) -> int | None:
    """A query parameter that is a non-negative 64-bit integer (ASCII digits only)."""
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    if not (raw.isascii() and raw.isdigit()):
        raise Bad(f"'{name}' must be an integer")
    value = int(raw)
    if not 0 <= value < 2**63:
        raise Bad(f"'{name}' is out of range")
    return value


def query_text(request: web.Request, name: str) -> str | None:
    """A query parameter as text (None when empty), short and without NUL."""
    raw = request.query.get(name)
    if raw is None or raw.strip() == "":
        return None
    if len(raw) > _MAX_QUERY or "\x00" in raw:
        raise Bad(f"'{name}' must be at most {_MAX_QUERY} characters, without NUL")
    return raw.strip()


def moment(text: str, name: str) -> datetime:
    """A page cursor's time: ISO 8601 with its offset, a real instant."""
    try:
        parsed = datetime.fromisoformat(text)
        if parsed.tzinfo is None:
            raise ValueError("no offset")
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        raise Bad(f"'{name}' must be the 'next' value of the previous page") from None


def query_cursor(request: web.Request, name: str = "before") -> str | None:
    """A ``WHEN|ID`` page cursor (the previous page's ``next``), checked and in UTC."""
    raw = query_text(request, name)
    if not raw:
        return None
    at, sep, last = raw.partition("|")
    if not sep or not 0 < len(last) <= 32:
        raise Bad(f"'{name}' must be the 'next' value of the previous page")
    return f"{moment(at, name).isoformat()}|{last}"


def query_limit(request: web.Request, *, default: int = 50, most: int = 200) -> int:
    """``limit``, clamped to 1..``most``."""
    value = query_int(request, "limit", default=default)
    assert value is not None
    return max(1, min(value, most))


def handler(fn: Any) -> Any:
    """A route whose bad input is a 400 with a reason."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            response: web.StreamResponse = await fn(request)
        except Bad as exc:
            return json_error(400, str(exc))
        return response

    wrapped.__name__ = fn.__name__
    wrapped.__doc__ = fn.__doc__
    return wrapped


def runtime_of(request: web.Request) -> Runtime:
    """The gateway's runtime."""
    return request.app[RUNTIME]

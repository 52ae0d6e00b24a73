"""``http_request``: HTTP to the hosts the configuration allows, with secrets by name.

Any string argument may contain ``{{secret:NAME}}``; it is replaced at execution with the
value of the environment variable ``[secrets]`` maps NAME to. The model only ever sees the
reference: the value is scrubbed from the response (and from errors) before it is returned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Literal
from urllib.parse import urlsplit

import httpx
from pydantic import Field

from agent_core.secrets import Secrets, UnknownSecret
from agent_core.tools.base import Tool, ToolContext, ToolFailed, TurnContext

Method = Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
_SHOWN_HEADERS = ("content-type", "location", "retry-after")
_MAX_BODY = 1024 * 1024


def host_allowed(url: str, allowed: Sequence[str]) -> bool:
    """True when the URL's host (or host:port) is listed; ports default per scheme."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname.lower()
    for entry in allowed:
        name, sep, entry_port = entry.lower().rpartition(":")
        if not sep:
            name, entry_port = entry.lower(), ""
        if name == host and (not entry_port or entry_port == str(port)):
            return True
    return False


def http_request_factory(
    *,
    allowed_hosts: Sequence[str],
    secrets: Secrets,
    timeout: float,
    output_limit: int,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Callable[[TurnContext], list[Tool]]:
    """The factory of the ``http_request`` tool (built once, the same for every turn)."""

    async def http_request(
        context: ToolContext,
        method: Method,
        url: Annotated[str, Field(min_length=1)],
        headers: dict[str, str] | None = None,
        body: str | None = None,
    ) -> str:
        """Send an HTTP request to an allowed host and return status, headers and body.

        Strings may contain {{secret:NAME}} to use a configured credential.
        """
        return await _send(
            method,
            url,
            headers or {},
            body,
            context=context,
            allowed_hosts=allowed_hosts,
            secrets=secrets,
            client_timeout=timeout,
            transport=transport,
        )

    tool = Tool(
        http_request,
        idempotent=lambda arguments: arguments.get("method") in ("GET", "HEAD"),
        timeout=timeout + 5,
        output_limit=output_limit,
    )
    return lambda turn: [tool]


async def _send(
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: str | None,
    *,
    context: ToolContext,
    allowed_hosts: Sequence[str],
    secrets: Secrets,
    client_timeout: float,
    transport: httpx.AsyncBaseTransport | None,
) -> str:
    try:
        real_url = secrets.substitute(url)
        real_headers = {k: secrets.substitute(v) for k, v in headers.items()}
        real_body = None if body is None else secrets.substitute(body)
    except UnknownSecret as exc:
        known = ", ".join(secrets.names) or "none"
        raise ToolFailed(f"unknown secret {exc.args[0]!r} (configured: {known})") from None
    if not host_allowed(real_url, allowed_hosts):
        listed = ", ".join(allowed_hosts) or "none: set [tools.http_request] allowed_hosts"
        raise ToolFailed(f"host not allowed: {secrets.scrub(url)} (allowed: {listed})")
    # The same on every re-run of this call: servers that honour it make a re-run harmless.
    real_headers.setdefault("Idempotency-Key", context.idempotency_key)
    try:
        async with httpx.AsyncClient(
            timeout=client_timeout, transport=transport, follow_redirects=False
        ) as client:
            response = await client.request(
                method, real_url, headers=real_headers, content=real_body
            )
    except httpx.HTTPError as exc:
        raise ToolFailed(secrets.scrub(f"{type(exc).__name__}: {exc}")) from None
    shown = "".join(
        f"{name}: {response.headers[name]}\n" for name in _SHOWN_HEADERS if name in response.headers
    )
    text = response.content[:_MAX_BODY].decode(response.encoding or "utf-8", errors="replace")
    return secrets.scrub(f"HTTP {response.status_code} {response.reason_phrase}\n{shown}\n{text}")

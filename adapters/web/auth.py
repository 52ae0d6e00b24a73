"""Who may use the web chat: a token holder, or (without a token) a client on this machine
with no proxy in between (pure)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Mapping

from adapters.base import Forbidden, Unauthorized
from adapters.payloads import same_secret

# Headers a proxy adds: with one in front, "loopback" says nothing about who is asking.
PROXY_HEADERS = (
    "Forwarded",
    "X-Forwarded-For",
    "X-Real-IP",
    "Via",
    "X-Forwarded-Host",
    "X-Client-IP",
    "True-Client-IP",
    "CF-Connecting-IP",
    "Fastly-Client-IP",
    "X-Cluster-Client-IP",
)
SESSION_COOKIE = "chatgate_session"


def session_value(token: str) -> str:
    """What the sign-in cookie holds: derived from the token (not the token itself), so a
    new token ends every session."""
    return hmac.new(token.encode(), b"chatgate web session", hashlib.sha256).hexdigest()


def check_local(*, remote: str | None, host: str | None, headers: Mapping[str, str]) -> None:
    """Without a token: a loopback client, naming this machine, with no proxy between.

    The ``Host`` header must name this machine: a web page elsewhere that rebinds its own
    domain to 127.0.0.1 must not reach the chat from the user's browser. A proxy header
    means someone else's request arrived through a proxy on this machine."""
    if not is_loopback(remote):
        raise Forbidden("the web chat only answers on loopback unless CHATGATE_WEB_TOKEN is set")
    if not is_local_host(host):
        raise Forbidden("the web chat only answers to localhost names unless a token is set")
    if any(name in headers for name in PROXY_HEADERS):
        raise Forbidden("a request through a proxy needs CHATGATE_WEB_TOKEN to be set")


def check_token(*, bearer: str | None, cookie: str | None, token: str) -> None:
    """The token holder: ``Authorization: Bearer TOKEN`` (scripts) or the sign-in cookie
    (the page). Never from a URL."""
    if bearer is not None and same_secret(bearer, token):
        return
    if cookie is not None and same_secret(cookie, session_value(token)):
        return
    raise Unauthorized("a valid web chat token is required")


def check_same_origin(*, origin: str | None, host: str | None) -> None:
    """Refuse a state-changing request that a page on another origin sent from a browser."""
    if origin is None:
        return
    _scheme, _sep, rest = origin.partition("://")
    if not host or rest.lower() != host.lower():
        raise Forbidden(f"cross-origin request from {origin} refused")


def is_local_host(host: str | None) -> bool:
    """True when a Host header names this machine (localhost or a loopback address)."""
    if not host or any(c in host for c in "@/\\?#"):
        return False
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    name = name.strip("[]").lower()
    return name == "localhost" or name.endswith(".localhost") or is_loopback(name)


def is_loopback(remote: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped loopback addresses."""
    if not remote:
        return False
    try:
        address = ipaddress.ip_address(remote.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback

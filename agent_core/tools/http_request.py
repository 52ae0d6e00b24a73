"""``http_request``: HTTP to the hosts the configuration allows, with secrets by name.

Any string argument may contain ``{{secret:NAME}}``; it is replaced at execution with the
value of the environment variable ``[secrets]`` maps NAME to, and only when the request
goes to a host that secret is bound to. The model only ever sees the reference: the value
is scrubbed (in its disguises too) from the response and from errors.

Where a request may go (``[tools.http_request] allowed_hosts``):

- ``api.example.com`` means https on port 443; ``api.example.com:8443`` another port;
  ``http://host:port`` allows plain http to that host and port (80 without one);
- the name is resolved once; when it resolves to a loopback, private, link-local (cloud
  metadata), multicast or otherwise reserved address, the request is refused unless that
  very address is listed as an IP literal. The connection goes to the address that was
  checked (TLS still verifies the name), so a second lookup cannot point it elsewhere;
- redirects are not followed, and the response body is read up to a cap.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import string
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal
from urllib.parse import SplitResult, urlsplit, urlunsplit

import httpx
from pydantic import Field

from agent_core.secrets import Secrets, UnknownSecret, without_cut_edge
from agent_core.tools.base import Tool, ToolContext, ToolFailed, TurnContext, compress

Method = Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
Resolver = Callable[[str, int], Awaitable[list[str]]]
_SHOWN_HEADERS = ("content-type", "location", "retry-after")
_MAX_BODY = 1024 * 1024
# Every printable ASCII character: a charset must read these bytes as themselves.
_ASCII = string.printable.encode("ascii")


@dataclass(frozen=True, slots=True)
class _Entry:
    scheme: str
    host: str
    port: int

    @classmethod
    def parse(cls, entry: str) -> _Entry:
        scheme = "https"
        text = entry.strip().lower()
        if "://" in text:
            scheme, _, text = text.partition("://")
        parts = urlsplit(f"{scheme}://{text}")
        if scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
            raise ValueError(f"not a host, host:port or http://host:port entry: {entry!r}")
        return cls(scheme, parts.hostname, parts.port or (443 if scheme == "https" else 80))

    @property
    def literal(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        try:
            return ipaddress.ip_address(self.host)
        except ValueError:
            return None


def allowed_entry(url: str, allowed: Sequence[str]) -> _Entry | None:
    """The entry that lets this URL through (scheme, host and port all match), or None."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    for raw in allowed:
        entry = _Entry.parse(raw)
        if (entry.scheme, entry.host, entry.port) == (parts.scheme, parts.hostname.lower(), port):
            return entry
    return None


def host_allowed(url: str, allowed: Sequence[str]) -> bool:
    """True when an entry of ``allowed`` lets this URL through."""
    return allowed_entry(url, allowed) is not None


_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))


def _public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """A global unicast address, also after unwrapping an IPv4 address carried inside an
    IPv6 one (mapped, 6to4, Teredo, NAT64): those can lead back to loopback or metadata."""
    if isinstance(address, ipaddress.IPv6Address):
        inner: list[ipaddress.IPv4Address] = []
        if address.ipv4_mapped is not None:
            inner.append(address.ipv4_mapped)
        if address.sixtofour is not None:
            inner.append(address.sixtofour)
        if address.teredo is not None:
            inner.extend(address.teredo)
        if any(address in network for network in _NAT64):
            inner.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        if inner:
            return all(_public(v4) for v4 in inner)
    return address.is_global and not address.is_multicast


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the system resolver gives for ``host``."""
    loop = asyncio.get_running_loop()
    found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in found]


def http_request_factory(
    *,
    allowed_hosts: Sequence[str],
    secrets: Secrets,
    timeout: float,
    output_limit: int,
    transport: httpx.AsyncBaseTransport | None = None,
    resolve: Resolver = system_resolver,
) -> Callable[[TurnContext], list[Tool]]:
    """The factory of the ``http_request`` tool (built once, the same for every turn)."""
    for entry in allowed_hosts:
        _Entry.parse(entry)  # a bad entry fails at start, not at the first request

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
        request = _Request(method, url, headers or {}, body)
        try:
            return await request.send(
                context=context,
                allowed_hosts=allowed_hosts,
                secrets=secrets,
                client_timeout=timeout,
                transport=transport,
                resolve=resolve,
                output_limit=output_limit,
            )
        except ToolFailed as exc:
            raise ToolFailed(secrets.scrub(str(exc))) from None
        except Exception as exc:
            # One boundary around substitution, parsing and the request: whatever fails,
            # the model and the log get a message with no secret in it.
            raise ToolFailed(secrets.scrub(f"{type(exc).__name__}: {exc}")) from None

    tool = Tool(
        http_request,
        idempotent=lambda arguments: arguments.get("method") in ("GET", "HEAD"),
        timeout=timeout + 5,
        output_limit=output_limit,
    )
    return lambda turn: [tool]


@dataclass(frozen=True, slots=True)
class _Request:
    method: str
    url: str
    headers: Mapping[str, str]
    body: str | None

    async def send(
        self,
        *,
        context: ToolContext,
        allowed_hosts: Sequence[str],
        secrets: Secrets,
        client_timeout: float,
        transport: httpx.AsyncBaseTransport | None,
        resolve: Resolver,
        output_limit: int,
    ) -> str:
        texts = [self.url, *self.headers.values(), *([self.body] if self.body else [])]
        try:
            used = secrets.referenced(texts)
        except UnknownSecret as exc:
            known = ", ".join(secrets.names) or "none"
            raise ToolFailed(f"unknown secret {exc.args[0]!r} (configured: {known})") from None
        url = secrets.substitute(self.url)
        parts = urlsplit(url)
        entry = allowed_entry(url, allowed_hosts)
        if entry is None:
            listed = ", ".join(allowed_hosts) or "none: set [tools.http_request] allowed_hosts"
            raise ToolFailed(f"host not allowed: {self.url} (allowed: {listed})")
        for name in used:
            bound = secrets.hosts(name)
            if bound is not None and allowed_entry(url, bound) is None:
                raise ToolFailed(
                    f"secret {name} may not be sent to {entry.host} (it is bound to "
                    f"{', '.join(bound)})"
                )
        address = await _checked_address(entry, resolve)
        real_headers = {k: secrets.substitute(v) for k, v in self.headers.items()}
        # The same on every re-run of this call: servers that honour it make a re-run harmless.
        real_headers.setdefault("Idempotency-Key", context.idempotency_key)
        # Bodies are read as sent, never decompressed: no bomb gets past the size cap.
        real_headers.setdefault("Accept-Encoding", "identity")
        real_headers["Host"] = parts.netloc.rpartition("@")[2]
        real_body = None if self.body is None else secrets.substitute(self.body)
        pinned = _pinned(parts, address)
        extensions = {"sni_hostname": entry.host} if entry.scheme == "https" else {}
        async with (
            httpx.AsyncClient(
                timeout=client_timeout, transport=transport, follow_redirects=False
            ) as client,
            client.stream(
                self.method,
                pinned,
                headers=real_headers,
                content=real_body,
                extensions=extensions,
            ) as response,
        ):
            data = await _capped_body(response)
        shown = "".join(
            f"{name}: {response.headers[name]}\n"
            for name in _SHOWN_HEADERS
            if name in response.headers
        )
        text = _decoded(bytes(data), response.encoding)
        cut = ""
        if len(data) >= _MAX_BODY:
            text, cut = without_cut_edge(text), f"\n[... cut at {_MAX_BODY} bytes ...]"
        status = f"HTTP {response.status_code} {response.reason_phrase}"
        # Cut to a few times what the model will be shown before scrubbing (the tool cuts
        # it again, to its limit, so no edge of this cut reaches the model).
        return secrets.scrub(compress(f"{status}\n{shown}\n{text}{cut}", 4 * output_limit))


def _decoded(data: bytes, declared: str | None) -> str:
    """The body as text, in its declared charset only when that charset reads ASCII as
    ASCII. One that does not (UTF-16, EBCDIC, UTF-7) would turn a secret the server
    echoed into characters no scrubber matches, which the model could encode back."""
    encoding = declared or "utf-8"
    try:
        keeps_ascii = _ASCII.decode(encoding) == _ASCII.decode("ascii")
    except (LookupError, ValueError):  # unknown, not a text codec, or cannot read ASCII
        keeps_ascii = False
    return data.decode(encoding if keeps_ascii else "utf-8", errors="replace")


async def _capped_body(response: httpx.Response) -> bytearray:
    """The body as sent (not decompressed), read up to the cap."""
    data = bytearray()
    try:
        async for chunk in response.aiter_raw():
            data += chunk[: _MAX_BODY - len(data)]
            if len(data) >= _MAX_BODY:
                break
    except httpx.StreamConsumed:  # a transport that hands over a body already read
        data += response.content[:_MAX_BODY]
    return data


async def _checked_address(entry: _Entry, resolve: Resolver) -> str:
    """The address to connect to: a listed IP literal as it is; a name resolved once, and
    refused when any address it gives is not a public one."""
    literal = entry.literal
    if literal is not None:
        return str(literal)
    try:
        found = await resolve(entry.host, entry.port)
    except OSError as exc:
        raise ToolFailed(f"cannot resolve {entry.host}: {exc}") from None
    addresses = [ipaddress.ip_address(a.split("%")[0]) for a in found]
    if not addresses:
        raise ToolFailed(f"cannot resolve {entry.host}")
    private = [str(a) for a in addresses if not _public(a)]
    if private:
        raise ToolFailed(
            f"{entry.host} resolves to {', '.join(private)}, a loopback, private, link-local "
            "or reserved address: refused (list the address itself in allowed_hosts if it "
            "is meant)"
        )
    return str(addresses[0])


def _pinned(parts: SplitResult, address: str) -> str:
    """The URL with its host replaced by the checked address (credentials and port kept)."""
    userinfo, at, _ = parts.netloc.rpartition("@")
    host = f"[{address}]" if ":" in address else address
    netloc = f"{userinfo}{at}{host}" if parts.port is None else f"{userinfo}{at}{host}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

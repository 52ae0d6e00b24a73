"""The model's HTTP client in the gateway and worker processes: the whole answer, errors as
HttpUnreachable, and the proxy settings of the environment, read once per URL."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from agent_core.model import HttpUnreachable
from workers.http_poster import AiohttpPoster


@pytest.fixture
async def proxy() -> AsyncIterator[tuple[str, list[str]]]:
    """A forward proxy on loopback that answers every request itself, and what it saw."""
    seen: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.url} {await request.text()}")
        return web.json_response({"answered": "by the proxy"}, headers={"X-Should-Retry": "no"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


@pytest.fixture
async def poster(
    proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[AiohttpPoster]:
    """A client with HTTP_PROXY naming the proxy, and no NO_PROXY (a test may set one)."""
    for name in ("NO_PROXY", "no_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy[0])
    client = AiohttpPoster(timeout=5)
    yield client
    await client.aclose()


URL = "http://model.invalid/v1/chat/completions"


async def test_the_proxy_the_environment_names_is_used_and_read_once(
    poster: AiohttpPoster, proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = proxy[1]
    answer = await poster.post(URL, b'{"q": 1}', {"Content-Type": "application/json"})
    assert answer.status == 200
    assert answer.headers["x-should-retry"] == "no"  # names in lower case
    assert answer.body == b'{"answered": "by the proxy"}'
    assert seen == [f'POST {URL} {{"q": 1}}']
    # Read when the URL was first called: a later change needs a new client.
    monkeypatch.setenv("NO_PROXY", "model.invalid")
    await poster.post(URL, b"{}", {})
    assert len(seen) == 2


async def test_no_proxy_sends_it_straight_and_no_answer_is_unreachable(
    poster: AiohttpPoster, proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_PROXY", "model.invalid")
    with pytest.raises(HttpUnreachable, match="could not reach") as raised:
        await poster.post(URL, b"{}", {})
    assert not raised.value.timed_out
    assert proxy[1] == []

"""The model's HTTP client in the gateway and worker processes: aiohttp, which they run on
already (``agent_core.model.HttpPoster`` is the port)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

from agent_core.model import HttpAnswer, HttpUnreachable


class AiohttpPoster:
    """One ``aiohttp.ClientSession`` for every call, made on the running loop (a session and
    its connections belong to one loop: a worker's forked child makes its own).

    ``HTTPS_PROXY``, ``NO_PROXY`` and the like apply, as in the OpenAI SDK's client, read
    once per URL when it is first called: aiohttp's ``trust_env`` reads the whole
    environment and ``~/.netrc`` again on every request (about 0.5 ms of a turn here)."""

    def __init__(self, *, timeout: float) -> None:
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._proxies: dict[str, tuple[URL | None, aiohttp.BasicAuth | None]] = {}

    def _http(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout)
            )
            self._loop = loop
        return self._session

    def _proxy(self, url: str) -> tuple[URL | None, aiohttp.BasicAuth | None]:
        if url not in self._proxies:
            try:
                self._proxies[url] = get_env_proxy_for_url(URL(url))
            except LookupError:  # none set, or NO_PROXY names the host
                self._proxies[url] = (None, None)
        return self._proxies[url]

    async def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        lines: Callable[[bytes], None] | None = None,
    ) -> HttpAnswer:
        proxy, proxy_auth = self._proxy(url)
        try:
            async with self._http().post(
                url, data=body, headers=dict(headers), proxy=proxy, proxy_auth=proxy_auth
            ) as got:
                named = {name.lower(): value for name, value in got.headers.items()}
                if lines is None or not 200 <= got.status < 300:
                    return HttpAnswer(got.status, named, await got.read())
                # Split here rather than with readline(), which refuses a line over 128 KiB.
                rest = b""
                async for data in got.content.iter_any():
                    *whole, rest = (rest + data).split(b"\n")
                    for line in whole:
                        lines(line.rstrip(b"\r"))
                if rest:
                    lines(rest.rstrip(b"\r"))
                return HttpAnswer(got.status, named, b"")
        except TimeoutError as exc:  # aiohttp's own timeouts are TimeoutErrors too
            raise HttpUnreachable(f"no answer within {self._timeout:g} s", timed_out=True) from exc
        except aiohttp.ClientError as exc:
            raise HttpUnreachable(f"could not reach the model server: {exc}") from exc

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and self._loop is asyncio.get_running_loop():
            await session.close()

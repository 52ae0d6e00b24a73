"""The model's HTTP client in the gateway and worker processes: aiohttp, which they run on
already (``agent_core.model.HttpPoster`` is the port)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import aiohttp

from agent_core.model import HttpAnswer, HttpUnreachable


class AiohttpPoster:
    """One ``aiohttp.ClientSession`` for every call, made on the running loop (a session and
    its connections belong to one loop: a worker's forked child makes its own). It reads
    ``HTTPS_PROXY`` and the like, as the OpenAI SDK's client does."""

    def __init__(self, *, timeout: float) -> None:
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _http(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop or self._session.closed:
            self._session = aiohttp.ClientSession(
                trust_env=True, timeout=aiohttp.ClientTimeout(total=self._timeout)
            )
            self._loop = loop
        return self._session

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> HttpAnswer:
        try:
            async with self._http().post(url, data=body, headers=dict(headers)) as got:
                content = await got.read()
                named = {name.lower(): value for name, value in got.headers.items()}
                return HttpAnswer(got.status, named, content)
        except TimeoutError as exc:  # aiohttp's own timeouts are TimeoutErrors too
            raise HttpUnreachable(f"no answer within {self._timeout:g} s", timed_out=True) from exc
        except aiohttp.ClientError as exc:
            raise HttpUnreachable(f"could not reach the model server: {exc}") from exc

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and self._loop is asyncio.get_running_loop():
            await session.close()

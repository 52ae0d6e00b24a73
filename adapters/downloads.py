"""Fetching a file a platform holds (``FileSource.fetch``): one GET, no redirects (a
token must not follow one to another host), only from the platform's own hosts (a link in
an event is the platform's, but a token is never sent anywhere else), read in chunks so
the file store can stop at its limit."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Mapping
from urllib.parse import urlsplit

import aiohttp

from agent_core.files.fetching import FileUnavailable

CHUNK = 64 * 1024
# A whole download may take this long (a slow link and a large file), 60 s without a byte.
DOWNLOAD_SECONDS = 600.0


def host_of(url: str) -> str:
    """The host of ``url``, lower-case ("" when it has none)."""
    return (urlsplit(url).hostname or "").lower()


def check_host(url: str, hosts: Collection[str], *, platform: str) -> None:
    """Refuse a link outside the platform's hosts (a host, or ``.domain`` for any below:
    those over https only, so a token never travels in the clear)."""
    host = host_of(url)
    secure = urlsplit(url).scheme == "https"
    for allowed in hosts:
        if host == allowed or (allowed.startswith(".") and host.endswith(allowed) and secure):
            return
    raise FileUnavailable(f"{platform} gave a link to {host or 'nowhere'}, not one of its hosts")


async def download(
    session: aiohttp.ClientSession,
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    platform: str,
) -> AsyncIterator[bytes]:
    """The body of ``url``, chunk by chunk; :class:`FileUnavailable` for an answer that
    is not the file, or none."""
    try:
        async with session.get(
            url,
            headers=dict(headers or {}),
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=DOWNLOAD_SECONDS, sock_read=60),
        ) as got:
            if got.status != 200:
                raise FileUnavailable(f"{platform} answered {got.status} for the file")
            async for chunk in got.content.iter_chunked(CHUNK):
                yield chunk
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise FileUnavailable(f"{platform} could not be reached for it ({exc!r})") from exc

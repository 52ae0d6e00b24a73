"""Files attached in the web chat: uploaded first (``POST /api/uploads``, one file a
request, streamed to the state directory within the size cap), then named by their random
id in the message that carries them; the turn fetches them from here like any platform's
file (``WebSender.fetch``). The id is 128 random bits: knowing one is what lets a message
use the file."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import BodyPartReader

UPLOAD_ID = re.compile(r"[0-9a-f]{32}")
CHUNK = 64 * 1024


class UploadTooLarge(Exception):
    """The upload went past the cap; nothing of it is kept."""


def uploads_dir(state_dir: Path) -> Path:
    """Where uploads wait for the message that uses them."""
    return state_dir / "uploads"


async def save_upload(part: BodyPartReader, directory: Path, *, limit: int) -> tuple[str, int]:
    """Stream one multipart part to a new upload; its id and size."""
    await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
    upload_id = uuid.uuid4().hex
    temporary = directory / f".incoming-{upload_id}"
    size = 0
    try:
        with await asyncio.to_thread(temporary.open, "xb") as out:
            while chunk := await part.read_chunk(CHUNK):
                size += len(chunk)
                if size > limit:
                    raise UploadTooLarge(limit)
                await asyncio.to_thread(out.write, chunk)
        await asyncio.to_thread(os.replace, temporary, directory / upload_id)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
    return upload_id, size


async def read_upload(directory: Path, upload_id: str) -> AsyncIterator[bytes]:
    """An upload's bytes; ``FileNotFoundError`` when there is none by that id."""
    if UPLOAD_ID.fullmatch(upload_id) is None:
        raise FileNotFoundError(upload_id)
    with await asyncio.to_thread((directory / upload_id).open, "rb") as source:
        while chunk := await asyncio.to_thread(source.read, CHUNK):
            yield chunk

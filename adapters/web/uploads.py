"""Files attached in the web chat: uploaded first (``POST /api/uploads``, one file a
request, streamed within the size cap), then named by their random id in the message that
carries them; the turn fetches them from here like any platform's file
(``WebSender.fetch``). The id is 128 random bits: knowing one is what lets a message use
the file. They are kept in the state directory, or, with a bucket configured, in the
bucket (any gateway or worker reads them), a day at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import BodyPartReader

from agent_core.files.bucket import BucketBlobs

UPLOAD_ID = re.compile(r"[0-9a-f]{32}")
CHUNK = 64 * 1024


class UploadTooLarge(Exception):
    """The upload went past the cap; nothing of it is kept."""


class Uploads:
    """Where uploads wait for the message that uses them."""

    def __init__(self, state_dir: Path, bucket: BucketBlobs | None = None) -> None:
        self.directory = state_dir / "uploads"
        self._bucket = bucket

    async def save(self, part: BodyPartReader, *, limit: int) -> tuple[str, int]:
        """Stream one multipart part to a new upload; its id and size."""
        directory = self.directory
        await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
        upload_id = uuid.uuid4().hex
        temporary = directory / f".incoming-{upload_id}"
        size = 0
        try:
            with await asyncio.to_thread(temporary.open, "xb+") as out:
                while chunk := await part.read_chunk(CHUNK):
                    size += len(chunk)
                    if size > limit:
                        raise UploadTooLarge(limit)
                    await asyncio.to_thread(out.write, chunk)
                if self._bucket is not None:
                    await asyncio.to_thread(out.seek, 0)
                    await self._bucket.put_upload(upload_id, out)
            if self._bucket is None:
                await asyncio.to_thread(os.replace, temporary, directory / upload_id)
        finally:
            with contextlib.suppress(FileNotFoundError):
                temporary.unlink()
        return upload_id, size

    async def read(self, upload_id: str) -> AsyncIterator[bytes]:
        """An upload's bytes; ``FileNotFoundError`` when there is none by that id."""
        if UPLOAD_ID.fullmatch(upload_id) is None:
            raise FileNotFoundError(upload_id)
        if self._bucket is not None:
            yield await self._bucket.read_upload(upload_id)
            return
        with await asyncio.to_thread((self.directory / upload_id).open, "rb") as source:
            while chunk := await asyncio.to_thread(source.read, CHUNK):
                yield chunk

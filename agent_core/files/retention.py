"""Files are kept ``CHATGATE_FILE_RETENTION_DAYS``: the file store keeps a file while a
message's attachment stored within that time uses it; copies in the conversations' inboxes
and files sent to the web chat go when they are that old; an upload no message used goes
after a day. Run by the gateway every hour."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import structlog

from agent_core.events import utcnow
from agent_core.files.blobs import Blobs
from agent_core.files.bucket import BucketBlobs
from agent_core.stores import FileRecords

log = structlog.get_logger("chatgate.files")

UPLOAD_SECONDS = 24 * 3600


@dataclass(frozen=True, slots=True)
class Swept:
    """What one sweep removed."""

    stored: int
    inbox: int
    uploads: int


class FileRetention:
    """Removes what is past its time (see the module's text)."""

    def __init__(self, records: FileRecords, state_dir: Path, *, days: float, blobs: Blobs) -> None:
        self._records = records
        self._state = state_dir
        self._seconds = days * 86400
        self._blobs = blobs

    async def sweep(self) -> Swept:
        keep = await self._records.file_hashes_in_use(utcnow() - timedelta(seconds=self._seconds))
        stored = await self._blobs.sweep(keep, older_than=self._seconds)
        state = self._state
        inbox = await asyncio.to_thread(_remove_older, state / "inbox", self._seconds, depth=2)
        uploads = await asyncio.to_thread(_remove_older, state / "uploads", UPLOAD_SECONDS)
        if isinstance(self._blobs, BucketBlobs):
            uploads += await self._blobs.sweep_uploads(UPLOAD_SECONDS)
        swept = Swept(stored, inbox, uploads)
        if stored or inbox or uploads:
            log.info("old files removed", stored=stored, inbox=inbox, uploads=uploads)
        return swept


def _remove_older(root: Path, seconds: float, *, depth: int = 1) -> int:
    """Remove the regular files ``depth`` levels under ``root`` older than ``seconds``;
    no link is followed, to a file or to a directory (each is looked at, not through)."""
    before = time.time() - seconds
    removed = 0
    try:
        entries = list(os.scandir(root))
    except (FileNotFoundError, NotADirectoryError):
        return 0
    for entry in entries:
        with contextlib.suppress(FileNotFoundError):
            if depth > 1:
                if entry.is_dir(follow_symlinks=False):
                    removed += _remove_older(Path(entry.path), seconds, depth=depth - 1)
                continue
            if not entry.is_file(follow_symlinks=False):
                continue
            if entry.stat(follow_symlinks=False).st_mtime < before:
                os.unlink(entry.path)
                removed += 1
    return removed

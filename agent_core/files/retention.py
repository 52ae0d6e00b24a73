"""Files are kept ``CHATGATE_FILE_RETENTION_DAYS``: the file store keeps a file while a
message's attachment stored within that time uses it; copies in the conversations' inboxes
and files sent to the web chat go when they are that old; an upload no message used goes
after a day. Run by the gateway every hour."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import structlog

from agent_core.events import utcnow
from agent_core.files.blobs import LocalBlobs
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

    def __init__(
        self, records: FileRecords, state_dir: Path, *, days: float, blobs: LocalBlobs
    ) -> None:
        self._records = records
        self._state = state_dir
        self._seconds = days * 86400
        self._blobs = blobs

    async def sweep(self) -> Swept:
        keep = await self._records.file_hashes_in_use(utcnow() - timedelta(seconds=self._seconds))
        stored = await self._blobs.sweep(keep, older_than=self._seconds)
        inbox = await asyncio.to_thread(_remove_older, self._state / "inbox", "*/*", self._seconds)
        uploads = await asyncio.to_thread(
            _remove_older, self._state / "uploads", "*", UPLOAD_SECONDS
        )
        swept = Swept(stored, inbox, uploads)
        if stored or inbox or uploads:
            log.info("old files removed", stored=stored, inbox=inbox, uploads=uploads)
        return swept


def _remove_older(root: Path, pattern: str, seconds: float) -> int:
    """Remove the regular files under ``root`` matching ``pattern`` older than ``seconds``
    (no link is followed: each is looked at, not through)."""
    if not root.is_dir():
        return 0
    before = time.time() - seconds
    removed = 0
    for path in root.glob(pattern):
        with contextlib.suppress(FileNotFoundError):
            found = path.lstat()
            if path.is_symlink() or not path.is_file() or found.st_mtime >= before:
                continue
            path.unlink()
            removed += 1
    return removed

"""The files that came with messages (``agent_core.files``)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from agent_core.journaled import Spend
from agent_core.records import AttachmentRecord


class FileRecords(Protocol):
    """A turn's files, and what fetching each came to."""

    async def turn_attachments(self, turn_id: int) -> list[AttachmentRecord]:
        """The files of the turn's message and of the messages it took in, in order."""
        ...

    async def attachment_stored(
        self, attachment_id: int, *, sha256: str, content_type: str, size: int
    ) -> None:
        """The file is in the file store under ``sha256``: it is never fetched again."""
        ...

    async def attachment_transcribed(
        self, attachment_id: int, *, turn_id: int, transcript: str, spend: Spend
    ) -> None:
        """What the audio says, heard once; its cost counts against the turn's budgets."""
        ...

    async def attachment_refused(self, attachment_id: int, error: str) -> None:
        """The file is not read, for ``error`` (told to the model and the person)."""
        ...

    async def file_hashes_in_use(self, since: datetime) -> set[str]:
        """The content hashes of files stored since ``since``: what retention keeps."""
        ...

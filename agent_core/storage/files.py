"""The store's reads and writes about the files messages carry (``agent_core.files``):
a turn's attachments and what fetching, reading and hearing each came to. One façade
with :class:`~agent_core.storage.store.Store`, which inherits them."""

from __future__ import annotations

from datetime import datetime

from agent_core.events import utcnow
from agent_core.journaled import Spend
from agent_core.records import AttachmentRecord
from agent_core.storage import attachments as attachment_rows
from agent_core.storage.database import Database


class FileRows:
    """Attachments, over :attr:`database`."""

    database: Database

    async def turn_attachments(self, turn_id: int) -> list[AttachmentRecord]:
        """The files of the turn's message and of the messages it took in, in order."""
        return await self.database.read(attachment_rows.for_turn, turn_id)

    async def attachment_stored(
        self, attachment_id: int, *, sha256: str, content_type: str, size: int
    ) -> None:
        """The file is in the file store under ``sha256``."""
        await self.database.write(
            attachment_rows.stored,
            attachment_id,
            sha256=sha256,
            content_type=content_type,
            size=size,
            at=utcnow(),
        )

    async def attachment_transcribed(
        self, attachment_id: int, *, turn_id: int, transcript: str, spend: Spend
    ) -> None:
        """What the audio says, and its cost counted with the turn's."""
        await self.database.write(
            attachment_rows.transcribed,
            attachment_id,
            turn_id=turn_id,
            transcript=transcript,
            spend=spend,
            now=utcnow(),
        )

    async def attachment_refused(self, attachment_id: int, error: str) -> None:
        """The file is not read, for ``error``."""
        await self.database.write(attachment_rows.refused, attachment_id, error)

    async def file_hashes_in_use(self, since: datetime) -> set[str]:
        """The content hashes of files stored since ``since``."""
        return await self.database.read(attachment_rows.hashes_in_use, since)

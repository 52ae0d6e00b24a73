"""A turn's files, made ready for its first model call: each one still pending is fetched
from its platform (``FileSource.fetch``) into the file store, within the caps (one file,
and all of a turn's together), and its row says so (``stored``, or ``refused`` and why):
that row is the journal, so a file is fetched once, whatever crashes after. Then each is
read for the model (``reading``) and copied into the conversation's inbox, which its
sandbox sees read-only at ``/files`` (``agent_core.sandbox.base.inbox_dir``): chatgate
writes there, never a command, so nothing a command leaves in its scratch directory (a
symbolic link, say) can turn the copy into a write elsewhere.

Only turns fetch, and a turn is only opened for someone let in: a stranger's file is
never downloaded. A conversation's turn reads its own message's files only: files never
cross conversations.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import structlog

from agent_core.errors import DeliveryError, ModelError
from agent_core.events import Platform
from agent_core.faults import FaultPoints
from agent_core.files.blobs import Blobs, TooLarge
from agent_core.files.reading import human_size, read_file
from agent_core.files.sniff import is_audio, sniff
from agent_core.journaled import Spend
from agent_core.model import ChatMessage, ImagePart, Transcriber
from agent_core.records import AttachmentRecord, TurnRecord
from agent_core.stores import FileRecords

log = structlog.get_logger("chatgate.files")

_UNSAFE = re.compile(r"[^A-Za-z0-9._ -]+")


class FileUnavailable(Exception):
    """The platform will not give the file (gone, too large for its API, not allowed);
    the message says why, for the person."""


class FileSource(Protocol):
    """Where a platform's files are fetched from (its sender)."""

    def fetch(self, file: AttachmentRecord, *, limit: int) -> AsyncIterator[bytes]:
        """The file's bytes as they come. May stop at ``limit`` (the store stops reading
        there anyway); raises :class:`FileUnavailable`, or an error of its transport."""
        ...


@dataclass(frozen=True, slots=True)
class FileLimits:
    """How much is read: one file, and all of a turn's files together (bytes)."""

    per_file: int = 25 * 1024 * 1024
    per_turn: int = 50 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Prepared:
    """A turn's first message with its files; what was not read and what voice notes
    said (both shown with the reply)."""

    message: ChatMessage
    not_read: tuple[str, ...] = ()
    heard: tuple[str, ...] = ()

    def plus(self, other: Prepared) -> Prepared:
        """This message, with what ``other`` did not read and heard too."""
        return Prepared(self.message, self.not_read + other.not_read, self.heard + other.heard)


class TurnFiles:
    """Makes a turn's message with its files (see the module's text)."""

    def __init__(
        self,
        records: FileRecords,
        blobs: Blobs,
        sources: Mapping[Platform, FileSource],
        *,
        limits: FileLimits = FileLimits(),
        inbox: Callable[[str], Path] | None = None,
        inside: str | None = None,
        faults: FaultPoints | None = None,
        transcriber: Transcriber | None = None,
    ) -> None:
        """``inbox(conversation_id)``: the conversation's inbox directory (made if need
        be); ``inside``: where a sandbox sees it (None: the command runs on the host, and
        sees it where it is)."""
        self._records = records
        self._blobs = blobs
        self._sources = dict(sources)
        self._limits = limits
        self._inbox = inbox
        self._inside = inside
        self._faults = faults or FaultPoints()
        self._transcriber = transcriber

    async def prepare(self, turn: TurnRecord, *, sees_images: bool) -> Prepared:
        """The turn's message, with its files read into it."""
        text = turn.trigger_text
        files = await self._records.turn_attachments(turn.id) if turn.has_files else []
        own = [file for file in files if file.turn_id == turn.id]
        if not own:
            return Prepared(ChatMessage(role="user", content=text))
        return await self._read(turn, own, text, sees_images=sees_images)

    async def taken_in(
        self, turn: TurnRecord, *, sees_images: bool, seen: set[int]
    ) -> Prepared | None:
        """The files of the messages the turn took in (busy modes ``steer``, ``collect``)
        not in ``seen`` yet, as a message of their own (None: none); ``seen`` grows."""
        files = [
            file
            for file in await self._records.turn_attachments(turn.id)
            if file.turn_id != turn.id and file.id not in seen
        ]
        if not files:
            return None
        seen.update(file.id for file in files)
        return await self._read(turn, files, "", sees_images=sees_images)

    async def _read(
        self, turn: TurnRecord, files: list[AttachmentRecord], text: str, *, sees_images: bool
    ) -> Prepared:
        files = await self._fetch(turn, files)
        sections: list[str] = []
        images: list[ImagePart] = []
        not_read: list[str] = []
        heard: list[str] = []
        for file in files:
            if file.status != "stored" or file.sha256 is None:
                reason = file.error or "it could not be fetched"
                sections.append(f"[Attached file: {file.name}. Not read: {reason}.]")
                not_read.append(f"{file.name} ({reason})")
                continue
            try:
                data = await self._blobs.read(file.sha256)
            except FileNotFoundError:
                sections.append(f"[Attached file: {file.name}. No longer kept.]")
                continue
            inside = await self._place(turn.conversation_id, file, data)
            if is_audio(file.content_type or ""):
                section, transcript = await self._hear(turn, file, data, inside)
                sections.append(section)
                if transcript is not None:
                    heard.append(f"🎤 {file.name}: “{transcript}”")
                else:
                    not_read.append(f"{file.name} (no transcript)")
                continue
            read = await read_file(
                file.name,
                file.content_type or "application/octet-stream",
                data,
                sees_images=sees_images,
                inside=inside,
            )
            sections.append(read.text)
            if read.image is not None:
                images.append(read.image)
        content = "\n\n".join([text, *sections]) if text else "\n\n".join(sections)
        message = ChatMessage(role="user", content=content, images=tuple(images))
        return Prepared(message, tuple(not_read), tuple(heard))

    async def _hear(
        self, turn: TurnRecord, file: AttachmentRecord, data: bytes, inside: str | None
    ) -> tuple[str, str | None]:
        """A voice note or audio file: its transcript (made once, journaled with its
        cost), or why there is none."""
        where = f"; in the sandbox at {inside}" if inside else ""
        about = f"{file.name} ({file.content_type}, {human_size(len(data))}{where})"
        transcript = file.transcript
        if transcript is None and self._transcriber is None:
            return (
                f"[Attached audio: {about}. Not transcribed: no transcription model is set "
                "(CHATGATE_TRANSCRIBE_MODEL).]",
                None,
            )
        if transcript is None:
            assert self._transcriber is not None
            try:
                heard = await self._transcriber.transcribe(file.name, data)
            except ModelError as exc:
                log.warning("transcribing a file failed", name=file.name, error=str(exc))
                return f"[Attached audio: {about}. It could not be transcribed: {exc}]", None
            transcript = heard.text
            spend = Spend(model=heard.model, prompt_tokens=0, completion_tokens=0,
                          cost_usd=heard.cost_usd)  # fmt: skip
            await self._records.attachment_transcribed(
                file.id, turn_id=turn.id, transcript=transcript, spend=spend
            )
        return (
            f"[Attached audio: {about}. Transcript:]\n{transcript}\n[End of {file.name}]",
            transcript,
        )

    async def _fetch(
        self, turn: TurnRecord, files: list[AttachmentRecord]
    ) -> list[AttachmentRecord]:
        """Fetch what is pending, within the caps; the rows as they are after."""
        used = sum(f.size or 0 for f in files if f.status == "stored")
        done: list[AttachmentRecord] = []
        for file in files:
            if file.status == "pending":
                file = await self._fetch_one(turn, file, room=self._limits.per_turn - used)
                if file.status == "stored":
                    used += file.size or 0
            done.append(file)
        return done

    async def _fetch_one(
        self, turn: TurnRecord, file: AttachmentRecord, *, room: int
    ) -> AttachmentRecord:
        limits = self._limits
        limit = min(limits.per_file, max(room, 0))
        error: str | None = None
        if file.declared_size is not None and file.declared_size > limits.per_file:
            error = (
                f"{human_size(file.declared_size)} is over the "
                f"{human_size(limits.per_file)} limit for one file"
            )
        elif file.declared_size is not None and file.declared_size > limit:
            error = (
                f"the message's files are over the {human_size(limits.per_turn)} "
                "limit for one message"
            )
        source = self._sources.get(turn.conversation.platform)
        if error is None and source is None:
            error = f"files from {turn.conversation.platform} cannot be fetched"
        if error is None:
            assert source is not None
            try:
                blob = await self._blobs.put(source.fetch(file, limit=limit), limit=limit)
            except TooLarge:
                error = (
                    f"it is over the {human_size(limit)} limit"
                    if limit == limits.per_file
                    else f"the message's files are over the {human_size(limits.per_turn)} "
                    "limit for one message"
                )
            except FileUnavailable as exc:
                error = str(exc)
            except (OSError, TimeoutError, DeliveryError) as exc:
                # The platform or the network failed it: the turn answers without it
                # (the person can send it again), rather than failing on it.
                log.warning("fetching a file failed", name=file.name, error=repr(exc))
                error = f"it could not be fetched ({type(exc).__name__})"
            else:
                content_type = sniff(blob.head, file.name)
                await self._records.attachment_stored(
                    file.id, sha256=blob.sha256, content_type=content_type, size=blob.size
                )
                self._faults.hit("after_file_stored")
                log.info("file fetched", name=file.name, size=blob.size, content_type=content_type)
                return _with(file, sha256=blob.sha256, content_type=content_type, size=blob.size)
        log.info("file not read", name=file.name, reason=error)
        await self._records.attachment_refused(file.id, error)
        return _refused(file, error)

    async def _place(self, conversation_id: str, file: AttachmentRecord, data: bytes) -> str | None:
        """Copy the file, read-only, into the conversation's inbox; where the sandbox sees
        it (None without one)."""
        if self._inbox is None:
            return None
        name = safe_name(file.name, file.position)
        try:
            directory = self._inbox(conversation_id)
            name = await asyncio.to_thread(_write_read_only, directory, name, file.id, data)
        except (OSError, ValueError) as exc:
            log.warning("placing a file in the sandbox's inbox failed", name=name, error=str(exc))
            return None
        return f"{self._inside}/{name}" if self._inside else str(directory / name)


def _write_read_only(directory: Path, name: str, attachment_id: int, data: bytes) -> str:
    """Copy ``data`` into the inbox as ``name``, or, when another file holds that name
    there, as ``NAME-ID.EXT`` (never over someone else's file); the name it has."""
    for candidate in (name, _numbered(name, attachment_id)):
        target = directory / candidate
        try:
            with target.open("xb") as out:
                out.write(data)
        except FileExistsError:
            if not target.is_symlink() and target.is_file() and target.read_bytes() == data:
                return candidate  # this file, copied by an earlier attempt
            continue
        os.chmod(target, 0o444)
        return candidate
    raise FileExistsError(f"{name} and {_numbered(name, attachment_id)} hold other files")


def _numbered(name: str, attachment_id: int) -> str:
    path = Path(name)
    return f"{path.stem}-{attachment_id}{path.suffix}"


def safe_name(name: str, position: int) -> str:
    """A file name the sandbox can hold: no directories, no dot files, nothing odd."""
    base = _UNSAFE.sub("_", Path(name).name).strip(" .") or f"file-{position + 1}"
    return base[:120]


def _with(file: AttachmentRecord, *, sha256: str, content_type: str, size: int) -> AttachmentRecord:
    return replace(file, status="stored", sha256=sha256, content_type=content_type, size=size)


def _refused(file: AttachmentRecord, error: str) -> AttachmentRecord:
    return replace(file, status="refused", error=error)

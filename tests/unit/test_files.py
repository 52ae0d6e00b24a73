"""A turn's files without a gateway: caps (declared and undeclared sizes), types from the
content, text cut to its head and tail, the file store's hashing and sweep, and what the
model is told of a file it cannot read."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent_core.events import ConversationKey
from agent_core.files.blobs import LocalBlobs, TooLarge
from agent_core.files.fetching import FileLimits, FileUnavailable, TurnFiles, safe_name
from agent_core.files.reading import head_and_tail, read_file
from agent_core.files.sniff import looks_like_text, sniff
from agent_core.records import AttachmentRecord, TurnRecord
from tests.fakes.files import png, wav

_WHERE = ConversationKey(platform="slack", workspace="T", channel="C", thread="1.0")


class Records:
    """The attachment rows in memory."""

    def __init__(self, *files: AttachmentRecord) -> None:
        self.files = {f.id: f for f in files}

    async def turn_attachments(self, turn_id: int) -> list[AttachmentRecord]:
        return list(self.files.values())

    async def attachment_stored(
        self, attachment_id: int, *, sha256: str, content_type: str, size: int
    ) -> None:
        self.files[attachment_id] = replace(
            self.files[attachment_id], status="stored", sha256=sha256,
            content_type=content_type, size=size,
        )  # fmt: skip

    async def attachment_refused(self, attachment_id: int, error: str) -> None:
        self.files[attachment_id] = replace(
            self.files[attachment_id], status="refused", error=error
        )

    async def file_hashes_in_use(self, since: datetime) -> set[str]:
        return set()


class Source:
    """A platform that serves files by name, counting the bytes it handed out; ``endless``
    ones never end (a size the platform did not declare, or got wrong)."""

    def __init__(self, files: dict[str, bytes], endless: frozenset[str] = frozenset()) -> None:
        self.files = files
        self.endless = endless
        self.given: dict[str, int] = {}

    async def fetch(self, file: AttachmentRecord, *, limit: int) -> AsyncIterator[bytes]:
        if file.name in self.endless:
            while True:
                self.given[file.name] = self.given.get(file.name, 0) + 65536
                yield bytes(65536)
        if file.name not in self.files:
            raise FileUnavailable("gone from the platform")
        self.given[file.name] = len(self.files[file.name])
        yield self.files[file.name]


def _file(index: int, name: str, size: int | None = None) -> AttachmentRecord:
    return AttachmentRecord(
        id=index, message_id=1, conversation_id="c1", turn_id=1, position=index, name=name,
        declared_type=None, declared_size=size, url=None, platform_file_id=None,
        status="pending",
    )  # fmt: skip


def _turn() -> TurnRecord:
    return TurnRecord(
        id=1, conversation_id="c1", conversation=_WHERE, status="running", attempts=0,
        user="slack:U1", trigger_text="look", reply_to="1.5", created_at=datetime.now(UTC),
        has_files=True,
    )  # fmt: skip


async def test_caps_declared_and_undeclared_and_nothing_read_past_them(tmp_path: Path) -> None:
    records = Records(
        _file(1, "notes.txt"),
        _file(2, "huge.iso", size=500 * 1024 * 1024),
        _file(3, "liar.bin", size=10),  # says 10 bytes, never ends
        _file(4, "gone.txt"),
    )
    source = Source({"notes.txt": b"hello\n"}, endless=frozenset({"liar.bin"}))
    limits = FileLimits(per_file=1024 * 1024, per_turn=2 * 1024 * 1024)
    files = TurnFiles(records, LocalBlobs(tmp_path), {"slack": source}, limits=limits)
    prepared = await files.prepare(_turn(), sees_images=False)
    assert "hello" in prepared.message.content
    assert "huge.iso" not in source.given  # refused on its declared size: never asked for
    assert source.given["liar.bin"] <= limits.per_file + 65536  # stopped at the cap
    states = {f.name: (f.status, f.error) for f in records.files.values()}
    assert states["notes.txt"] == ("stored", None)
    assert states["huge.iso"] == ("refused", "500.0 MB is over the 1.0 MB limit for one file")
    assert states["liar.bin"] == ("refused", "it is over the 1.0 MB limit")
    assert states["gone.txt"] == ("refused", "gone from the platform")
    assert len(prepared.not_read) == 3
    left = await asyncio.to_thread(lambda: list(tmp_path.glob(".incoming-*")))
    assert left == []  # nothing half-written is left
    # Fetched once: a second prepare (a resumed turn) asks the platform for nothing.
    source.given.clear()
    again = await files.prepare(_turn(), sees_images=False)
    assert source.given == {}
    assert again.message.content == prepared.message.content


async def test_the_turn_cap_counts_every_file_of_the_message(tmp_path: Path) -> None:
    records = Records(_file(1, "a.bin"), _file(2, "b.bin"), _file(3, "c.bin"))
    source = Source({name: os.urandom(600 * 1024) for name in ("a.bin", "b.bin", "c.bin")})
    limits = FileLimits(per_file=1024 * 1024, per_turn=1024 * 1024)
    files = TurnFiles(records, LocalBlobs(tmp_path), {"slack": source}, limits=limits)
    prepared = await files.prepare(_turn(), sees_images=False)
    assert [f.status for f in records.files.values()] == ["stored", "refused", "refused"]
    assert "over the 1.0 MB limit for one message" in prepared.not_read[0]


async def test_the_store_keeps_one_copy_by_content_and_sweeps_what_no_one_uses(
    tmp_path: Path,
) -> None:
    blobs = LocalBlobs(tmp_path)

    async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
        for part in parts:
            yield part

    one = await blobs.put(chunks(b"same ", b"bytes"), limit=100)
    two = await blobs.put(chunks(b"same bytes"), limit=100)
    assert one.sha256 == two.sha256 == hashlib.sha256(b"same bytes").hexdigest()
    assert await blobs.read(one.sha256) == b"same bytes"
    other = await blobs.put(chunks(b"other"), limit=100)
    with pytest.raises(TooLarge):
        await blobs.put(chunks(b"x" * 101), limit=100)
    old = time.time() - 3600
    for blob in (one, other):
        os.utime(blobs.path(blob.sha256), (old, old))
    assert await blobs.sweep({one.sha256}, older_than=60) == 1
    assert blobs.path(one.sha256).exists()
    assert not blobs.path(other.sha256).exists()
    with pytest.raises(ValueError, match="not a SHA-256"):
        blobs.path("../../etc/passwd")


def test_types_come_from_the_content_not_the_name() -> None:
    assert sniff(png(), "notes.txt") == "image/png"
    assert sniff(wav(), "photo.png") == "audio/x-wav"
    assert sniff(b"a,b\n1,2\n", "data.csv") == "text/csv"
    assert sniff(b"a,b\n1,2\n", "data.exe") == "text/plain"
    assert sniff(b"\x00\x01\x02", "data.csv") == "application/octet-stream"
    assert looks_like_text("café".encode()[:4])  # a character cut at the end is text
    assert not looks_like_text(b"\xff\xfe\xfd\xfc abc")


async def test_what_the_model_reads_of_each_kind() -> None:
    long = "\n".join(f"line {i}" for i in range(10_000))
    read = await read_file("log.txt", "text/plain", long.encode(), sees_images=False,
                           inside="/files/log.txt", characters=1000)  # fmt: skip
    assert read.text.startswith("[Attached file: log.txt (text/plain, ")
    assert "in the sandbox at /files/log.txt, cut to its first and last 500 characters" in read.text
    assert "characters left out" in read.text
    assert "line 9999" in read.text
    picture = await read_file("p.png", "image/png", png(), sees_images=True, inside=None)
    assert picture.image is not None
    assert picture.image.data == png()
    blind = await read_file("p.png", "image/png", png(), sees_images=False, inside=None)
    assert blind.image is None
    assert "This model cannot see images." in blind.text
    broken = await read_file("r.pdf", "application/pdf", b"%PDF-1.4 garbage", sees_images=False,
                             inside=None)  # fmt: skip
    assert "Its text could not be read" in broken.text
    binary = await read_file("x.bin", "application/octet-stream", b"\x00", sees_images=False,
                             inside=None)  # fmt: skip
    assert "Not readable as text." in binary.text
    assert head_and_tail("short", 10) == "short"


def test_names_in_the_sandbox_are_plain() -> None:
    assert safe_name("../../etc/passwd", 0) == "passwd"
    assert safe_name(".bashrc", 0) == "bashrc"
    assert safe_name("a/b\\c; rm -rf $HOME.txt", 0) == "b_c_ rm -rf _HOME.txt"
    assert safe_name("...", 2) == "file-3"


async def test_retention_keeps_what_a_recent_attachment_uses_and_removes_the_rest(
    tmp_path: Path,
) -> None:
    from agent_core.files.retention import FileRetention

    blobs = LocalBlobs(tmp_path / "files")

    async def one(data: bytes) -> AsyncIterator[bytes]:
        yield data

    used = await blobs.put(one(b"used"), limit=100)
    unused = await blobs.put(one(b"unused"), limit=100)
    recent = await blobs.put(one(b"recent"), limit=100)

    class InUse(Records):
        async def file_hashes_in_use(self, since: datetime) -> set[str]:
            return {used.sha256}

    def plant() -> list[Path]:
        inbox = tmp_path / "inbox" / "c1"
        uploads = tmp_path / "uploads"
        for directory in (inbox, uploads):
            directory.mkdir(parents=True, exist_ok=True)
        (inbox / "old.csv").write_text("x")
        (inbox / "new.csv").write_text("x")
        (uploads / ("a" * 32)).write_text("x")
        (inbox / "link").symlink_to(tmp_path / "files")
        return [inbox / "old.csv", uploads / ("a" * 32), blobs.path(used.sha256),
                blobs.path(unused.sha256)]  # fmt: skip

    old = time.time() - 40 * 86400
    for path in await asyncio.to_thread(plant):
        os.utime(path, (old, old))
    swept = await FileRetention(InUse(), tmp_path, days=30, blobs=blobs).sweep()
    assert (swept.stored, swept.inbox, swept.uploads) == (1, 1, 1)
    exists = await asyncio.to_thread(
        lambda: [blobs.path(b.sha256).exists() for b in (used, unused, recent)]
    )
    assert exists == [True, False, True]
    assert await asyncio.to_thread((tmp_path / "inbox" / "c1" / "new.csv").exists)


async def test_audio_is_transcribed_once_and_its_cost_counted(tmp_path: Path) -> None:
    from agent_core.errors import ModelError
    from agent_core.journaled import Spend
    from agent_core.model import Transcript
    from tests.fakes.files import ogg

    spent: list[tuple[int, str, Spend]] = []

    class Heard(Records):
        async def attachment_transcribed(
            self, attachment_id: int, *, turn_id: int, transcript: str, spend: Spend
        ) -> None:
            spent.append((turn_id, transcript, spend))
            self.files[attachment_id] = replace(self.files[attachment_id], transcript=transcript)

    class Ear:
        calls = 0

        async def transcribe(self, name: str, data: bytes) -> Transcript:
            Ear.calls += 1
            if name == "noise.ogg":
                raise ModelError("whisper-1: audio too short")
            return Transcript(text="call me back", model="whisper-1", cost_usd=0.0003)

    records = Heard(_file(1, "voice.ogg"), _file(2, "noise.ogg"))
    source = Source({"voice.ogg": ogg(), "noise.ogg": ogg(600)})
    files = TurnFiles(records, LocalBlobs(tmp_path), {"slack": source}, transcriber=Ear())
    prepared = await files.prepare(_turn(), sees_images=False)
    assert prepared.heard == ("🎤 voice.ogg: “call me back”",)
    assert prepared.not_read == ("noise.ogg (no transcript)",)
    assert "It could not be transcribed: whisper-1: audio too short" in prepared.message.content
    [(turn_id, transcript, spend)] = spent
    assert (turn_id, transcript, spend.model, spend.cost_usd) == (1, "call me back", "whisper-1",
                                                                  0.0003)  # fmt: skip
    again = await files.prepare(_turn(), sees_images=False)  # a resumed turn
    assert Ear.calls == 3  # the failed one is tried again; the heard one is not
    assert again.heard == prepared.heard


async def test_a_document_that_unzips_past_the_limit_is_not_parsed() -> None:
    """A Word file of a few hundred KB that unzips to 70 MB of XML: refused before any
    parser sees it (in the child process that reads documents), quickly."""
    import io
    import zipfile

    from agent_core.files.extract import UNZIPPED_LIMIT

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", b" " * (UNZIPPED_LIMIT + 1024 * 1024))
    bomb = out.getvalue()
    assert len(bomb) < 200 * 1024
    kind = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    started = time.monotonic()
    read = await read_file("plan.docx", kind, bomb, sees_images=False, inside=None)
    assert "Its text could not be read: it unzips to over 64 MB" in read.text
    assert time.monotonic() - started < 15


async def test_same_names_never_overwrite_each_other_in_the_inbox(tmp_path: Path) -> None:
    """Two screenshots both called image.png (Slack names pasted ones so): both are in the
    inbox, under two names, and a resumed turn copies neither again."""
    records = Records(_file(1, "image.png"), _file(2, "image.png"))
    first, second = png(2, 2), png(3, 3)
    contents = iter((first, second))

    class TwoPictures(Source):
        async def fetch(self, file: AttachmentRecord, *, limit: int) -> AsyncIterator[bytes]:
            yield next(contents)

    inbox = tmp_path / "inbox"
    files = TurnFiles(records, LocalBlobs(tmp_path / "files"), {"slack": TwoPictures({})},
                      inbox=lambda _c: inbox, inside="/files")  # fmt: skip
    await asyncio.to_thread(inbox.mkdir)
    prepared = await files.prepare(_turn(), sees_images=False)
    assert "in the sandbox at /files/image.png" in prepared.message.content
    assert "in the sandbox at /files/image-2.png" in prepared.message.content
    kept = await asyncio.to_thread(lambda: {p.name: p.read_bytes() for p in inbox.iterdir()})
    assert kept == {"image.png": first, "image-2.png": second}
    again = await files.prepare(_turn(), sees_images=False)
    assert again.message.content == prepared.message.content


async def test_retention_does_not_follow_a_link_out_of_the_inbox(tmp_path: Path) -> None:
    from agent_core.files.retention import FileRetention

    def plant() -> Path:
        victim = tmp_path / "elsewhere"
        victim.mkdir()
        (victim / "keep.txt").write_text("not chatgate's")
        old = time.time() - 90 * 86400
        os.utime(victim / "keep.txt", (old, old))
        (tmp_path / "inbox").mkdir()
        (tmp_path / "inbox" / "c9").symlink_to(victim)
        return victim / "keep.txt"

    kept = await asyncio.to_thread(plant)
    swept = await FileRetention(Records(), tmp_path, days=30, blobs=LocalBlobs(tmp_path)).sweep()
    assert swept.inbox == 0
    assert await asyncio.to_thread(kept.exists)


def test_a_token_goes_to_the_platforms_hosts_over_https_only() -> None:
    from adapters.downloads import check_host

    hosts = ("slack.com", ".slack.com")
    check_host("https://files.slack.com/files-pri/T1-F1/a.png", hosts, platform="Slack")
    for url in (
        "http://files.slack.com/files-pri/T1-F1/a.png",
        "https://files.slack.com@evil.example/a.png",
        "https://evil.example/?files.slack.com",
        "https://slack.com.evil.example/a.png",
    ):
        with pytest.raises(FileUnavailable):
            check_host(url, hosts, platform="Slack")


def test_send_file_refuses_a_nul_byte_as_an_error_of_the_call(tmp_path: Path) -> None:
    from agent_core.tools.base import ToolFailed
    from agent_core.tools.send_file import read_sandbox_file

    with pytest.raises(ToolFailed, match="NUL"):
        read_sandbox_file(tmp_path, "c1", "a\x00b", 1024)

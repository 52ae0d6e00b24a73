"""The file store: each file's bytes once, under its SHA-256, in the state directory
(``<state>/files/ab/abcdef...``). A file is written to a temporary name and renamed into
place when whole, so a reader never sees half of one and a crash leaves no partial file
under a hash."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

_HASH = re.compile(r"[0-9a-f]{64}")


class TooLarge(Exception):
    """The file went past its limit while it was read; nothing of it is kept."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


@dataclass(frozen=True, slots=True)
class Blob:
    """A stored file: its hash, its size, and its first bytes (what its type is told by)."""

    sha256: str
    size: int
    head: bytes


class Blobs(Protocol):
    """Where files' bytes are kept."""

    async def put(self, chunks: AsyncIterator[bytes], *, limit: int) -> Blob:
        """Keep the bytes ``chunks`` yields; raise :class:`TooLarge` past ``limit`` bytes
        (reading stops there)."""
        ...

    async def read(self, sha256: str) -> bytes:
        """A stored file's bytes (``FileNotFoundError`` when it is gone)."""
        ...

    async def sweep(self, keep: Collection[str], *, older_than: float) -> int:
        """Remove the files not in ``keep`` stored over ``older_than`` seconds ago; how
        many."""
        ...

    async def remove(self, sha256: str) -> bool:
        """Remove one stored file now (a person's data erased); False when it was gone."""
        ...


HEAD_BYTES = 8192


class LocalBlobs:
    """Files in a directory of this machine (one per deployment that shares a disk)."""

    def __init__(self, root: Path) -> None:
        self._root = root

    def path(self, sha256: str) -> Path:
        """Where a stored file lies (``ValueError`` for what is not a SHA-256)."""
        return self._path(sha256)

    def _path(self, sha256: str) -> Path:
        return self._root / sha256[:2] / checked_hash(sha256)

    async def put(self, chunks: AsyncIterator[bytes], *, limit: int) -> Blob:
        """Write to a temporary file beside the store, hash as it comes, rename when whole."""
        await asyncio.to_thread(self._root.mkdir, parents=True, exist_ok=True)
        temporary = self._root / f".incoming-{uuid.uuid4().hex}"
        digest = hashlib.sha256()
        size = 0
        head = b""
        try:
            with await asyncio.to_thread(temporary.open, "wb") as out:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > limit:
                        raise TooLarge(limit)
                    digest.update(chunk)
                    if len(head) < HEAD_BYTES:
                        head += chunk[: HEAD_BYTES - len(head)]
                    await asyncio.to_thread(out.write, chunk)
            sha256 = digest.hexdigest()
            final = self._path(sha256)
            await asyncio.to_thread(_place, temporary, final)
        finally:
            with contextlib.suppress(FileNotFoundError):
                temporary.unlink()
        return Blob(sha256, size, head)

    async def read(self, sha256: str) -> bytes:
        return await asyncio.to_thread(self._path(sha256).read_bytes)

    async def sweep(self, keep: Collection[str], *, older_than: float) -> int:
        return await asyncio.to_thread(self._sweep, set(keep), time.time() - older_than)

    async def remove(self, sha256: str) -> bool:
        path = self._path(sha256)
        try:
            await asyncio.to_thread(path.unlink)
        except FileNotFoundError:
            return False
        return True

    def _sweep(self, keep: set[str], before: float) -> int:
        removed = 0
        if not self._root.is_dir():
            return 0
        for path in self._root.glob("??/*"):
            if path.name in keep or _HASH.fullmatch(path.name) is None:
                continue
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_mtime < before:
                    path.unlink()
                    removed += 1
        for path in self._root.glob(".incoming-*"):  # left by a process that died writing
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_mtime < before:
                    path.unlink()
        return removed


def checked_hash(sha256: str) -> str:
    """``sha256`` when it is one (64 lower-case hex digits), else ``ValueError``: a name
    from outside never becomes a path or a key."""
    if _HASH.fullmatch(sha256) is None:
        raise ValueError(f"not a SHA-256: {sha256!r}")
    return sha256


def _place(temporary: Path, final: Path) -> None:
    """Move the whole file into place (the same bytes may be there already: keep those,
    touched, so retention counts from now)."""
    final.parent.mkdir(exist_ok=True)
    if final.exists():
        os.utime(final)
        return
    os.chmod(temporary, 0o444)
    os.replace(temporary, final)

"""The files an erased person leaves outside the database: stored blobs only they sent, web
uploads, and the copies in their conversations' sandbox inboxes."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Collection
from pathlib import Path

import structlog

from agent_core.files.blobs import Blobs
from agent_core.files.bucket import BucketBlobs
from agent_core.sandbox.base import inbox_dir

log = structlog.get_logger("chatgate.files")


async def remove_files(
    *,
    blobs: Collection[str],
    uploads: Collection[str],
    conversations: Collection[str],
    store: Blobs,
    state_dir: Path,
) -> int:
    """Remove what erasure named (see ``agent_core.storage.erasure.forget``); how many
    files went. An inbox file goes only when its bytes are one of ``blobs``: the others
    there are other people's."""
    removed = 0
    for sha256 in blobs:
        with contextlib.suppress(FileNotFoundError, ValueError):
            removed += await store.remove(sha256)
    for upload_id in uploads:
        if not upload_id.isalnum():
            continue
        if isinstance(store, BucketBlobs):
            removed += await store.remove_upload(upload_id)
        else:
            path = state_dir / "uploads" / upload_id
            with contextlib.suppress(FileNotFoundError):
                await asyncio.to_thread(path.unlink)
                removed += 1
    wanted = set(blobs)
    if wanted:
        for conversation_id in conversations:
            with contextlib.suppress(ValueError):
                directory = inbox_dir(state_dir, conversation_id)
                if directory is not None:
                    removed += await asyncio.to_thread(_remove_copies, directory, wanted)
    log.info("erased person's files removed", files=removed)
    return removed


def _remove_copies(directory: Path, hashes: set[str]) -> int:
    removed = 0
    for path in directory.iterdir():
        if path.is_symlink() or not path.is_file():
            continue
        if hashlib.sha256(path.read_bytes()).hexdigest() in hashes:
            path.unlink()
            removed += 1
    return removed

"""``send_file``: the agent sends a file from the conversation's sandbox (its working
directory, or the files people sent at ``/files``) to the conversation, on its platform:
Slack ``files_upload_v2`` into the thread, Telegram ``sendPhoto``/``sendDocument``,
Discord an attachment, the web chat a download link. The conversation keeps a note of it
(with the platform's receipt), written once per call.

The sandbox is another party's ground: a command decides what lies in the working
directory, symbolic links included. The file is opened one path component at a time
relative to the directory, refusing any link and anything but a regular file, so a path
can name nothing outside it (not /etc/passwd by a link, not the inbox of another
conversation by ``..``), whatever the command left there.

A call made again after a crash sends again where the platform can tell: Discord's nonce
returns the message already sent, Slack is looked at for the bot's file of the same name
and size, the web chat keeps files by content. Telegram cannot look, so there the tool is
not idempotent: a call cut off mid-way is not repeated unasked.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Annotated

from pydantic import Field

from agent_core.delivery import Outbound
from agent_core.events import OutgoingFile
from agent_core.files.reading import human_size
from agent_core.files.sniff import sniff
from agent_core.sandbox.base import FILES_INSIDE, SCRATCH_INSIDE, inbox_dir, scratch_dir
from agent_core.stores import Ledger
from agent_core.tools.base import Tool, ToolContext, ToolFailed, TurnContext


def send_file_factory(
    state_dir: Path, outbound: Outbound, notes: Ledger, *, limit: int
) -> Callable[[TurnContext], list[Tool]]:
    """The factory of ``send_file`` (two builds: idempotent or not, by platform)."""

    async def send_file(
        context: ToolContext,
        path: Annotated[str, Field(min_length=1, max_length=1000)],
        caption: Annotated[str, Field(max_length=1000)] | None = None,
    ) -> str:
        """Send a file to this conversation: one in your working directory (/scratch, or a
        path relative to it), or one people sent here (/files/NAME). Images show inline
        where the platform can."""
        turn = context.turn
        name, data = await asyncio.to_thread(
            read_sandbox_file, state_dir, turn.conversation_id, path, limit
        )
        content_type = sniff(data[:8192], name)
        receipt = await outbound.send_file(
            OutgoingFile(
                conversation=turn.conversation,
                name=name,
                data=data,
                content_type=content_type,
                caption=caption,
                idempotency_key=context.idempotency_key,
                resend=context.rerun,
            )
        )
        size = human_size(len(data))
        await notes.add_note(
            turn.conversation_id,
            f"Sent {name} ({size}).",
            payload={
                "file": {
                    "name": name,
                    "content_type": content_type,
                    "size": len(data),
                    "receipt": receipt,
                }
            },
            key=f"{context.idempotency_key}:file",
        )
        return f"Sent {name} ({content_type}, {size}) to the conversation."

    looks = Tool(send_file, idempotent=True)
    cannot_look = Tool(send_file, idempotent=False)

    def factory(context: TurnContext) -> list[Tool]:
        return [cannot_look if context.conversation.platform == "telegram" else looks]

    return factory


def read_sandbox_file(
    state_dir: Path, conversation_id: str, path: str, limit: int
) -> tuple[str, bytes]:
    """The name and bytes of ``path`` in the conversation's sandbox (see the module's
    text); ``ToolFailed`` saying why not."""
    if "\x00" in path:
        raise ToolFailed("a path with a NUL byte is not allowed")
    scratch = scratch_dir(state_dir, conversation_id)
    base, rest = _where(state_dir, conversation_id, scratch, path)
    parts = [p for p in PurePosixPath(rest).parts if p not in ("/", ".")]
    if not parts:
        raise ToolFailed(f"{path} names a directory, not a file")
    if ".." in parts:
        raise ToolFailed("a path with .. is not allowed")
    return parts[-1], _read_beneath(base, parts, limit)


def _where(state_dir: Path, conversation_id: str, scratch: Path, path: str) -> tuple[Path, str]:
    """The directory ``path`` is in, and the path below it."""
    inbox = inbox_dir(state_dir, conversation_id)
    for inside, directory in (
        (FILES_INSIDE, inbox),
        (SCRATCH_INSIDE, scratch),
        # The host's own paths (no sandbox: ``none``, where the model is told those).
        (str(scratch), scratch),
        *(((str(inbox), inbox),) if inbox is not None else ()),
    ):
        if path == inside or path.startswith(f"{inside}/"):
            if directory is None:
                raise ToolFailed(f"there is no {path}: nobody sent a file here")
            return directory, path[len(inside) :]
    if PurePosixPath(path).is_absolute():
        raise ToolFailed(f"{path} is not in this conversation's sandbox (/scratch or /files)")
    return scratch, path


def _read_beneath(base: Path, parts: list[str], limit: int) -> bytes:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    directory = os.open(base, flags | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, flags | os.O_DIRECTORY, dir_fd=directory)
            except OSError as exc:
                raise ToolFailed(f"{part}: {_why(exc)}") from None
            os.close(directory)
            directory = inner
        try:
            # Non-blocking: a FIFO left there must not hang the gateway.
            handle = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=directory)
        except OSError as exc:
            raise ToolFailed(f"{parts[-1]}: {_why(exc)}") from None
    finally:
        os.close(directory)
    try:
        found = os.fstat(handle)
        if not stat.S_ISREG(found.st_mode):
            raise ToolFailed(f"{parts[-1]} is not a regular file")
        if found.st_size > limit:
            raise ToolFailed(f"{parts[-1]} is {human_size(found.st_size)}; files up to "
                             f"{human_size(limit)} are sent")  # fmt: skip
        with os.fdopen(handle, "rb", closefd=False) as source:
            data = source.read(limit + 1)
        if len(data) > limit:
            raise ToolFailed(f"{parts[-1]} grew past {human_size(limit)} while it was read")
        return data
    finally:
        os.close(handle)


def _why(error: OSError) -> str:
    if error.errno == errno.ELOOP:
        return "a symbolic link is not followed"
    if error.errno == errno.ENOENT:
        return "no such file"
    if error.errno == errno.ENOTDIR:
        return "not a directory"
    return error.strerror or str(error)

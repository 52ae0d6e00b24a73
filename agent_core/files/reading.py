"""A stored file as the model reads it: an image as an image part (for a model that sees
images; others get a line saying what was attached), text inlined (its head and tail when
it is long), a PDF's or an office document's text, and for anything else a line saying
what it is. Documents are read in a child process under limits (``extract``). Every file
is also in the conversation's sandbox at ``/files/NAME``, which the line says, so
``run_command`` can work on the whole of it."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agent_core.files.extract import ExtractionFailed, extract
from agent_core.files.sniff import IMAGE_TYPES, is_text
from agent_core.model import ImagePart

# A document's text past this many characters is cut (head and tail kept).
TEXT_CHARACTERS = 20_000
_OFFICE = {
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
}


@dataclass(frozen=True, slots=True)
class Read:
    """What the model gets of one file: a section of the message's text, and an image."""

    text: str
    image: ImagePart | None = None


async def read_file(
    name: str,
    content_type: str,
    data: bytes,
    *,
    sees_images: bool,
    inside: str | None,
    characters: int = TEXT_CHARACTERS,
) -> Read:
    """``data`` (a file called ``name``, of the sniffed ``content_type``) for the prompt;
    ``inside``: where the sandbox sees it."""
    about = f"{name} ({content_type}, {human_size(len(data))})"
    where = f"; in the sandbox at {inside}" if inside else ""
    if content_type in IMAGE_TYPES:
        if sees_images:
            return Read(f"[Attached image: {about}{where}]", ImagePart(content_type, data))
        return Read(f"[Attached image: {about}{where}. This model cannot see images.]")
    reader = _extractor(content_type)
    if reader is None:
        return Read(f"[Attached file: {about}{where}. Not readable as text.]")
    try:
        text = await reader(data)
    except (ExtractionFailed, OSError) as exc:  # damaged or hostile: say so, read the rest
        return Read(f"[Attached file: {about}{where}. Its text could not be read: {exc}]")
    shown = head_and_tail(text, characters)
    cut = "" if shown is text else f", cut to its first and last {characters // 2:,} characters"
    return Read(
        f"[Attached file: {about}{where}{cut}]\n{shown}\n[End of {name}]",
    )


def _extractor(content_type: str) -> Callable[[bytes], Awaitable[str]] | None:
    if is_text(content_type):
        return _decoded
    kind = "pdf" if content_type == "application/pdf" else _OFFICE.get(content_type)
    if kind is None:
        return None
    return functools.partial(extract, kind)


async def _decoded(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def head_and_tail(text: str, characters: int) -> str:
    """``text``, or its head and tail with a line saying how much was left out."""
    if len(text) <= characters:
        return text
    half = characters // 2
    left_out = len(text) - 2 * half
    return f"{text[:half]}\n[... {left_out:,} characters left out ...]\n{text[-half:]}"


def human_size(size: int) -> str:
    """1.2 MB, 340 KB, 12 bytes."""
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MB"
    if size >= 1024:
        return f"{size / 1024:.0f} KB"
    return f"{size} bytes"

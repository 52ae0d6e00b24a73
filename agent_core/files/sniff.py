"""A file's type from its first bytes (magic numbers, with ``filetype``), not from its
name: a name says what its sender calls it; the content says what a reader will meet. Text
(UTF-8, no NUL) is told apart from binary, and only then does the name pick the flavour
(CSV, JSON, Markdown, code)."""

from __future__ import annotations

from pathlib import PurePosixPath

import filetype

BINARY = "application/octet-stream"
_TEXT_FLAVOURS = {
    ".csv": "text/csv",
    ".tsv": "text/tab-separated-values",
    ".json": "application/json",
    ".jsonl": "application/jsonl",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
    ".xml": "application/xml",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".toml": "application/toml",
    ".py": "text/x-python",
    ".js": "text/javascript",
    ".ts": "text/x-typescript",
    ".sh": "text/x-shellscript",
    ".sql": "application/sql",
    ".diff": "text/x-diff",
    ".patch": "text/x-diff",
    ".log": "text/plain",
}
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def sniff(head: bytes, name: str) -> str:
    """The MIME type of a file that starts with ``head`` (its first few KB)."""
    if not head:
        return "text/plain"
    kind = filetype.guess(head)
    if kind is not None:
        return str(kind.mime)
    if looks_like_text(head):
        return _TEXT_FLAVOURS.get(PurePosixPath(name).suffix.lower(), "text/plain")
    return BINARY


def looks_like_text(head: bytes) -> bool:
    """UTF-8 (a character cut at the end of ``head`` allowed), with no NUL byte."""
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(head) - 3 and exc.reason == "unexpected end of data"
    return True


def is_text(content_type: str) -> bool:
    """Whether a sniffed type is text to inline."""
    return content_type.startswith("text/") or content_type in {
        "application/json",
        "application/jsonl",
        "application/xml",
        "application/yaml",
        "application/toml",
        "application/sql",
    }


def is_audio(content_type: str) -> bool:
    """Whether a sniffed type is sound to transcribe (a voice note is Ogg; WebM and MP4
    hold sound as often as pictures, and the transcription model takes both)."""
    return content_type.startswith("audio/") or content_type in {"video/webm", "video/mp4"}

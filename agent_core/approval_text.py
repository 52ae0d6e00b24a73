"""How a call's arguments are shown to the person asked to approve it: the whole call,
with nothing hidden in it.

Every platform's prompt shows this text. Characters a person cannot see (control, format
and direction-changing characters: zero-width spaces, bidi overrides, ...) are shown as
``\\uXXXX`` escapes, and long runs of blanks (``ls`` followed by 3,000 spaces, then ``;
curl ... | sh``) are folded into a visible count; either is flagged in the prompt. A call
whose text is still longer than :data:`SHOWN_LIMIT` is not put to anyone: the model is told
to shorten it (a policy rule that allows a call needs no prompt, so no limit applies there).
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass

from pydantic import JsonValue

# What fits in every platform's prompt with its header (Discord's 2,000 is the tightest).
SHOWN_LIMIT = 1500
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
# Unicode's Default_Ignorable_Code_Point ranges (variation selectors, fillers, tags ...)
# and the braille blank: drawn as nothing, or as a blank, whatever their category.
_IGNORABLE = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x2800, 0x2800),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
_BLANKS = re.compile(r"[ \t]{16,}")


@dataclass(frozen=True, slots=True)
class ShownArguments:
    """The text to show, and what was done to make it honest."""

    text: str
    flags: tuple[str, ...] = ()

    @property
    def warning(self) -> str:
        """One line for the prompt ("" when nothing was flagged)."""
        return f"Look closely: {'; '.join(self.flags)}." if self.flags else ""


def show_arguments(arguments: JsonValue) -> ShownArguments:
    """The arguments as indented JSON, with invisible characters escaped and long blank
    runs folded."""
    text = json.dumps(arguments, ensure_ascii=False, indent=1)
    flags: list[str] = []
    escaped = "".join(_escape(c) for c in text)
    # JSON escapes control characters itself; those are flagged too (newlines and tabs,
    # shown as \n and \t, are not).
    if any(_hidden(c) for value in _texts(arguments) for c in value):
        flags.append("it contains invisible or direction-changing characters, shown as \\u escapes")
    folded = _BLANKS.sub(lambda m: f"⟪{len(m.group())} blanks⟫", escaped)
    if folded != escaped:
        flags.append("it contains long runs of blanks, shown as ⟪N blanks⟫")
    return ShownArguments(folded, tuple(flags))


def for_prompt(arguments: JsonValue) -> ShownArguments:
    """What a prompt shows: :func:`show_arguments`, kept within :data:`SHOWN_LIMIT` (head
    and tail, the cut flagged) for a prompt made before the limit existed."""
    shown = show_arguments(arguments)
    if len(shown.text) <= SHOWN_LIMIT:
        return shown
    head, tail = shown.text[: SHOWN_LIMIT * 2 // 3], shown.text[-(SHOWN_LIMIT // 3) :]
    omitted = len(shown.text) - len(head) - len(tail)
    return ShownArguments(
        f"{head}\n⟪{omitted} characters not shown⟫\n{tail}",
        (*shown.flags, f"{omitted} characters in the middle are not shown"),
    )


def fits(arguments: JsonValue) -> bool:
    """Can a prompt show these arguments whole? (Counting what a code block's fence inside
    them grows by when a platform breaks it up.)"""
    text = show_arguments(arguments).text
    return len(text) + text.count("```") <= SHOWN_LIMIT


def _texts(value: JsonValue) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [*value, *(t for v in value.values() for t in _texts(v))]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []


def _hidden(char: str) -> bool:
    """Not shown as itself: invisible, ignorable, or a blank that is not a plain space."""
    if char in "\n\t ":
        return False
    category = unicodedata.category(char)
    if category in _INVISIBLE or category == "Zs":
        return True
    code = ord(char)
    return any(low <= code <= high for low, high in _IGNORABLE)


def _escape(char: str) -> str:
    if not _hidden(char):
        return char
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"

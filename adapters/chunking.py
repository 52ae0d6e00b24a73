"""Split a long rendered reply into messages that each fit a platform's length limit.

Every platform caps a message's length, and a model can write more than that. The split
happens *after* rendering (see ``adapters.markdown``), on the exact text that is sent, so
the limit holds for what the platform counts (Python characters; the markup counted too,
which only errs on the safe side).

Where to cut, in order of preference: a blank line between paragraphs (or the edge of a
code block), a line break, a space, and only then anywhere. Some cuts would change what a
message means, so they are never made, or are repaired:

* a code block cut in two is closed at the end of one chunk and reopened (same fence and
  language) at the start of the next, so each chunk renders on its own. For Telegram HTML
  every element open at the cut is closed and reopened the same way (``<pre><code ...>``,
  ``<blockquote>``, ``<b>`` ...), so each chunk is well-formed on its own;
* no cut inside an HTML tag, a Slack ``<url|text>`` / ``<@U123>`` token, a ``&amp;``-style
  entity or a short Telegram link (``<a ...>...</a>``);
* no cut that leaves an empty code block or an empty element behind.

Chunks lose no non-whitespace content and are stripped of leading and trailing blank
lines. Stdlib only, no I/O.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "DISCORD_LIMIT",
    "MIN_LIMIT",
    "SLACK_LIMIT",
    "TELEGRAM_LIMIT",
    "split_message",
]

# Slack's own guidance for chat.postMessage ``text`` is about 4,000 characters.
SLACK_LIMIT = 3900
TELEGRAM_LIMIT = 4096
DISCORD_LIMIT = 2000
MIN_LIMIT = 100

Markup = Literal["auto", "markdown", "html"]

_NONSPACE = re.compile(r"\S")
_BLANK_LINES = re.compile(r"(?:[ \t]*\n)+")
_ENTITY = r"&(?:[A-Za-z][A-Za-z0-9]{0,31}|#[0-9]{1,8}|#[xX][0-9A-Fa-f]{1,8});"
_ATOMS_MARKDOWN = re.compile(r"<[^<>\n]*>|" + _ENTITY)
_ATOMS_HTML = re.compile(r"<[^<>]*>|" + _ENTITY)
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)(?:\s[^<>]*)?>")
_HTML_HINT = re.compile(r"<pre>|<pre><code class=|</(?:b|i|s|u|a|code|pre|blockquote)>")
_FENCE_INFO = re.compile(r"^[A-Za-z0-9_+#.-]{0,32}$")
# Close and reopen a fence or an element around a cut only while that costs little.
_MAX_REOPEN = 64


def split_message(text: str, limit: int, *, markup: Markup = "auto") -> list[str]:
    """Split rendered ``text`` into chunks of at most ``limit`` characters.

    ``markup`` says how code blocks look: ``"markdown"`` (Slack and Discord: ``` fences),
    ``"html"`` (Telegram: ``<pre>`` and friends) or ``"auto"`` (HTML when the text has
    Telegram's tags outside code fences). Text that fits is returned unchanged as
    ``[text]``; longer text yields non-empty chunks (none at all if it is only whitespace).
    Raises ValueError when ``limit`` is below ``MIN_LIMIT`` (100).
    """
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT}, got {limit}")
    if len(text) <= limit:
        return [text]
    if markup == "auto":
        markup = "html" if _looks_like_html(text) else "markdown"
    layout: _Layout = _HtmlLayout(text) if markup == "html" else _MarkdownLayout(text)
    return _Splitter(text, limit, layout).run()


def _looks_like_html(text: str) -> bool:
    outside = []
    pos = 0
    for fence in _fences(text):
        outside.append(text[pos : fence.start])
        pos = fence.end
    outside.append(text[pos:])
    return any(_HTML_HINT.search(part) for part in outside)


# --------------------------------------------------------------------------- layouts


class _Layout:
    """What a format says about cut positions: where one may cut, what to close/reopen."""

    def __init__(self, text: str, atoms: re.Pattern[str]) -> None:
        self.text = text
        spans = [(m.start(), m.end()) for m in atoms.finditer(text)]
        self.atom_starts = [s for s, _ in spans]
        self.atom_ends = [e for _, e in spans]

    def inside_atom(self, cut: int) -> bool:
        k = bisect_left(self.atom_starts, cut) - 1  # the last atom starting before the cut
        return k >= 0 and self.atom_ends[k] > cut

    def allowed(self, cut: int) -> bool:
        """May the text be cut here (a chunk ends before ``cut``, the next starts there)?"""
        raise NotImplementedError

    def in_code(self, cut: int) -> bool:
        raise NotImplementedError

    def edges(self) -> list[int]:
        """Cut positions as good as a paragraph break: just before or after code blocks."""
        raise NotImplementedError

    def reopen(self, pos: int) -> str:
        """What a chunk starting at ``pos`` must begin with (a fence, open tags)."""
        raise NotImplementedError

    def close(self, cut: int) -> str:
        """What a chunk ending at ``cut`` must end with."""
        raise NotImplementedError


@dataclass(frozen=True)
class _Fence:
    start: int  # the opening fence line
    content: int  # the first content line
    close_start: int  # the closing fence line (len(text) if unclosed)
    end: int  # just after the closing fence line
    opener: str  # the fence line to reopen with
    closer: str


def _fences(text: str) -> list[_Fence]:
    """The ``` code blocks of ``text``, line by line (a one-line ```x``` is not a block)."""
    fences: list[_Fence] = []
    pos = 0
    opened: tuple[int, int, str, str] | None = None
    for line in text.split("\n"):
        start, pos = pos, pos + len(line) + 1
        stripped = line.strip()
        if opened is None:
            if not stripped.startswith("```"):
                continue
            run = len(stripped) - len(stripped.lstrip("`"))
            info = stripped[run:].strip()
            if "```" in info:
                continue
            ticks = "`" * run
            opener = ticks + info if _FENCE_INFO.match(info) else ticks
            opened = (start, min(pos, len(text)), opener, ticks)
        elif stripped.startswith(opened[3]) and stripped == "`" * len(stripped):
            fence_start, content, opener, closer = opened
            end = start + len(line)
            fences.append(_Fence(fence_start, content, start, end, opener, closer))
            opened = None
    if opened is not None:
        fence_start, content, opener, closer = opened
        fences.append(_Fence(fence_start, content, len(text), len(text), opener, closer))
    return fences


class _MarkdownLayout(_Layout):
    """Slack mrkdwn and Discord Markdown: code blocks are ``` fenced lines."""

    def __init__(self, text: str) -> None:
        super().__init__(text, _ATOMS_MARKDOWN)
        self.fences = _fences(text)
        self.starts = [f.start for f in self.fences]

    def _fence(self, cut: int) -> _Fence | None:
        k = bisect_left(self.starts, cut) - 1  # fences starting strictly before the cut
        if k >= 0 and cut < self.fences[k].end:
            return self.fences[k]
        return None

    def allowed(self, cut: int) -> bool:
        if self.inside_atom(cut):
            return False
        fence = self._fence(cut)
        if fence is None:
            return True
        if not fence.content <= cut <= fence.close_start:
            return False  # inside a fence line
        # Both halves must keep some code, or one chunk would hold an empty block.
        return bool(
            _NONSPACE.search(self.text, fence.content, cut)
            and _NONSPACE.search(self.text, cut, fence.close_start)
        )

    def in_code(self, cut: int) -> bool:
        fence = self._fence(cut)
        return fence is not None and fence.content <= cut <= fence.close_start

    def edges(self) -> list[int]:
        out: list[int] = []
        for fence in self.fences:
            out.extend((fence.start - 1, fence.end))
        return out

    def reopen(self, pos: int) -> str:
        fence = self._fence(pos)
        if fence is None or not fence.content <= pos < fence.close_start:
            return ""
        opener = fence.opener if len(fence.opener) <= _MAX_REOPEN else fence.closer
        return opener + "\n"

    def close(self, cut: int) -> str:
        fence = self._fence(cut)
        if fence is None or not fence.content <= cut < fence.close_start:
            return ""
        return "\n" + fence.closer


@dataclass(frozen=True)
class _Tag:
    start: int
    end: int
    closing: bool
    name: str
    raw: str


class _HtmlLayout(_Layout):
    """Telegram HTML: elements open at a cut are closed and reopened around it."""

    def __init__(self, text: str) -> None:
        super().__init__(text, _ATOMS_HTML)
        self.tags = [
            _Tag(m.start(), m.end(), bool(m.group(1)), m.group(2).lower(), m.group())
            for m in _TAG.finditer(text)
        ]
        self.tag_starts = [t.start for t in self.tags]
        self.tag_ends = [t.end for t in self.tags]
        # The open elements after each tag: stacks[k] holds after the first k tags.
        stack: list[_Tag] = []
        self.stacks: list[tuple[_Tag, ...]] = [()]
        links: list[tuple[int, int]] = []
        for tag in self.tags:
            if not tag.closing:
                stack.append(tag)
            elif any(open_.name == tag.name for open_ in stack):
                while stack:
                    open_ = stack.pop()
                    if open_.name == tag.name:
                        if tag.name == "a" and tag.end - open_.start <= _MAX_REOPEN * 4:
                            links.append((open_.start, tag.end))
                        break
            self.stacks.append(tuple(stack))
        self.link_starts = [s for s, _ in links]
        self.link_ends = [e for _, e in links]

    def _stack(self, cut: int) -> tuple[_Tag, ...]:
        return self.stacks[bisect_right(self.tag_ends, cut)]

    def allowed(self, cut: int) -> bool:
        if self.inside_atom(cut):
            return False
        k = bisect_left(self.link_starts, cut) - 1
        if k >= 0 and self.link_ends[k] > cut:
            return False  # inside a short <a>...</a>: keep the link whole
        before = bisect_right(self.tag_ends, cut) - 1
        if before >= 0:
            tag = self.tags[before]
            if not tag.closing and not _NONSPACE.search(self.text, tag.end, cut):
                return False  # right after an opening tag: an empty element
        after = bisect_left(self.tag_starts, cut)
        if after < len(self.tags):
            tag = self.tags[after]
            if tag.closing and not _NONSPACE.search(self.text, cut, tag.start):
                return False  # right before a closing tag: an empty element
        return True

    def in_code(self, cut: int) -> bool:
        return any(tag.name == "pre" for tag in self._stack(cut))

    def edges(self) -> list[int]:
        out: list[int] = []
        for tag in self.tags:
            if tag.name == "pre":
                out.append(tag.end if tag.closing else tag.start)
        return out

    def reopen(self, pos: int) -> str:
        return "".join(tag.raw for tag in self._stack(pos))

    def close(self, cut: int) -> str:
        return "".join(f"</{tag.name}>" for tag in reversed(self._stack(cut)))


# --------------------------------------------------------------------------- splitting


class _Splitter:
    def __init__(self, text: str, limit: int, layout: _Layout) -> None:
        self.text = text
        self.limit = limit
        self.layout = layout
        self.edges = sorted(set(layout.edges()))

    def run(self) -> list[str]:
        text = self.text
        chunks: list[str] = []
        pos = _skip_blank_lines(text, 0)
        while pos < len(text):
            prefix = self.layout.reopen(pos)
            if len(prefix) + len(text[pos:].rstrip()) <= self.limit:
                self._add(chunks, prefix, text[pos:], "")
                break
            cut, kind = self._choose(pos, prefix)
            if kind == "raw":  # nothing fits with the markup around it: plain slice
                self._add(chunks, "", text[pos:cut], "")
            else:
                self._add(chunks, prefix, text[pos:cut], self.layout.close(cut))
            while kind == "space" and cut < len(text) and text[cut] in " \t":
                cut += 1
            pos = _skip_blank_lines(text, cut)
        return chunks

    @staticmethod
    def _add(chunks: list[str], prefix: str, body: str, suffix: str) -> None:
        body = body.rstrip()
        if _NONSPACE.search(body):
            chunks.append(prefix + body + suffix)

    def _fits(self, pos: int, cut: int, prefix: str) -> bool:
        body = self.text[pos:cut].rstrip()
        return len(prefix) + len(body) + len(self.layout.close(cut)) <= self.limit

    def _ok(self, pos: int, cut: int, prefix: str) -> bool:
        return (
            bool(_NONSPACE.search(self.text, pos, cut))
            and self.layout.allowed(cut)
            and self._fits(pos, cut, prefix)
        )

    def _choose(self, pos: int, prefix: str) -> tuple[int, str]:
        """The best cut after ``pos``: paragraph, line, space, anywhere; then ``raw``."""
        text, layout = self.text, self.layout
        high = min(len(text), pos + self.limit - len(prefix))
        newlines = []
        at = text.rfind("\n", pos + 1, high + 1)
        while at > pos:
            newlines.append(at)
            at = text.rfind("\n", pos + 1, at)
        first = bisect_right(self.edges, pos)
        last = bisect_right(self.edges, high)
        paragraphs = set(self.edges[first:last])
        for at in newlines:
            if _BLANK_LINES.match(text, at + 1) and not layout.in_code(at):
                paragraphs.add(at)
        for cut in sorted(paragraphs, reverse=True):
            if self._ok(pos, cut, prefix):
                return cut, "paragraph"
        for cut in newlines:
            if self._ok(pos, cut, prefix):
                return cut, "line"
        at = text.rfind(" ", pos + 1, high + 1)
        while at > pos:
            if self._ok(pos, at, prefix):
                return at, "space"
            at = text.rfind(" ", pos + 1, at)
        for cut in range(high, pos, -1):
            if self._ok(pos, cut, prefix):
                return cut, "hard"
        return min(len(text), pos + max(1, self.limit)), "raw"


def _skip_blank_lines(text: str, pos: int) -> int:
    if pos < len(text) and text[pos] == "\n":
        pos += 1
    match = _BLANK_LINES.match(text, pos)
    return match.end() if match else pos

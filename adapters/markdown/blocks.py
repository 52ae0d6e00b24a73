"""Markdown blocks, as a chat model writes them: paragraphs, ATX headings, fenced code
(with an optional language), bullet and numbered list items, block quotes and horizontal
rules; ``parse`` turns a reply into them (their text through ``adapters.markdown.inline``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TypeAlias

from adapters.markdown.inline import Inline, parse_inlines


@dataclass(frozen=True)
class Paragraph:
    """Lines of inline text (line breaks kept: chat platforms show them)."""

    inlines: tuple[Inline, ...]
    gap: bool = False


@dataclass(frozen=True)
class Heading:
    """An ATX heading, ``#`` to ``######``."""

    level: int
    inlines: tuple[Inline, ...]
    gap: bool = False


@dataclass(frozen=True)
class CodeBlock:
    """A fenced code block; ``lang`` is ``""`` without a (plausible) language."""

    code: str
    lang: str
    gap: bool = False


@dataclass(frozen=True)
class ListItem:
    """One bullet (``ordered=False``) or numbered item; ``depth`` 0 is the outermost list."""

    ordered: bool
    number: str
    depth: int
    inlines: tuple[Inline, ...]
    gap: bool = False


@dataclass(frozen=True)
class Quote:
    """A block quote. Flat: it never holds another quote or a code block."""

    blocks: tuple[Block, ...]
    gap: bool = False


@dataclass(frozen=True)
class Rule:
    """A horizontal rule."""

    gap: bool = False


# ``gap``: a blank line separated the block from the one before it in the source.
Block: TypeAlias = Paragraph | Heading | CodeBlock | ListItem | Quote | Rule


# --------------------------------------------------------------------------- blocks

_FENCE = re.compile(r"^([ \t]*)(`{3,}|~{3,})(.*)$")
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*))?$")
_HEADING_CLOSE = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")
_RULE_LINE = re.compile(r"^ {0,3}(?:(?:\*[ \t]*){3,}|(?:-[ \t]*){3,}|(?:_[ \t]*){3,})$")
_BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+(\S.*)$")
_ORDERED = re.compile(r"^([ \t]*)(\d{1,9})[.)][ \t]+(\S.*)$")
_QUOTE = re.compile(r"^[ \t]{0,3}>")
_QUOTE_MARKERS = re.compile(r"^(?:[ \t]{0,3}>[ \t]?)+")
_LANG = re.compile(r"^[A-Za-z0-9_+#.-]{1,32}$")


def parse(markdown: str) -> list[Block]:
    """Parse a whole reply into blocks."""
    text = markdown.replace("\r\n", "\n").replace("\r", "\n")
    return _BlockParser(text.split("\n"), in_quote=False).parse()


class _BlockParser:
    """Line-by-line block parser; paragraphs and list items take continuation lines."""

    def __init__(self, lines: list[str], *, in_quote: bool) -> None:
        self.lines = lines
        self.in_quote = in_quote
        self.out: list[Block] = []
        self.gap = False
        self.leaf: list[str] = []
        self.leaf_gap = False
        self.item: tuple[bool, str, int] | None = None
        self.indents: list[int] = []

    def parse(self) -> list[Block]:
        lines = self.lines
        i = 0
        while i < len(lines):
            line = lines[i]
            fence = _FENCE.match(line)
            if fence and not (fence.group(2)[0] == "`" and "`" in fence.group(3)):
                self._flush()
                i = self._code(fence, i)
                continue
            i += 1
            if not line.strip():
                self._flush()
                self.gap = True
                continue
            if not self.in_quote and _QUOTE.match(line):
                self._flush()
                inner = [_QUOTE_MARKERS.sub("", line, count=1)]
                while i < len(lines) and _QUOTE.match(lines[i]):
                    inner.append(_QUOTE_MARKERS.sub("", lines[i], count=1))
                    i += 1
                self._quote(_BlockParser(inner, in_quote=True).parse())
                self.indents.clear()
                continue
            if _RULE_LINE.match(line):
                self._flush()
                self._emit(Rule())
                self.indents.clear()
                continue
            heading = _HEADING.match(line)
            if heading:
                self._flush()
                content = _HEADING_CLOSE.sub("", heading.group(2) or "").strip()
                if content:
                    self._emit(Heading(len(heading.group(1)), parse_inlines(content)))
                self.indents.clear()
                continue
            bullet, ordered = _BULLET.match(line), _ORDERED.match(line)
            if bullet:
                self._flush()
                self.item = (False, "", self._depth(bullet.group(1)))
                self._start_leaf(bullet.group(2).strip())
                continue
            if ordered:
                self._flush()
                self.item = (True, str(int(ordered.group(2))), self._depth(ordered.group(1)))
                self._start_leaf(ordered.group(3).strip())
                continue
            if self.leaf:
                self.leaf.append(line.strip())
            else:
                self.indents.clear()
                self._start_leaf(line.strip())
        self._flush()
        return self.out

    def _emit(self, block: Block, gap: bool | None = None) -> None:
        gap = self.gap if gap is None else gap
        self.out.append(replace(block, gap=gap and bool(self.out)))
        self.gap = False

    def _start_leaf(self, first: str) -> None:
        self.leaf = [first]
        self.leaf_gap = self.gap
        self.gap = False

    def _flush(self) -> None:
        if not self.leaf:
            return
        inlines = parse_inlines("\n".join(self.leaf))
        block: Block
        if self.item is None:
            block = Paragraph(inlines)
        else:
            ordered, number, depth = self.item
            block = ListItem(ordered, number, depth, inlines)
        self.gap, self.leaf, self.item = self.leaf_gap, [], None
        self._emit(block)

    def _depth(self, indent: str) -> int:
        width = len(indent.expandtabs(4))
        while self.indents and self.indents[-1] > width:
            self.indents.pop()
        if not self.indents or self.indents[-1] < width:
            self.indents.append(width)
        return min(len(self.indents) - 1, 5)

    def _code(self, fence: re.Match[str], start: int) -> int:
        indent, marker, info = len(fence.group(1)), fence.group(2), fence.group(3).strip()
        lang = info.split()[0] if info else ""
        if not _LANG.match(lang):
            lang = ""
        body: list[str] = []
        i = start + 1
        while i < len(self.lines):
            line = self.lines[i]
            i += 1
            stripped = line.strip()
            if len(stripped) >= len(marker) and stripped == marker[0] * len(stripped):
                break
            lead = len(line) - len(line.lstrip(" \t"))
            body.append(line[min(lead, indent) :])
        self._emit(CodeBlock("\n".join(body), lang))
        return i

    def _quote(self, inner: list[Block]) -> None:
        """Emit a quote, hoisting code blocks out of it (no platform nests them well)."""
        run: list[Block] = []
        first = True
        for block in inner:
            if isinstance(block, CodeBlock):
                if run:
                    self._emit(Quote(tuple(run)), None if first else run[0].gap)
                    first, run = False, []
                self._emit(block, None if first else block.gap)
                first = False
            else:
                run.append(block)
        if run:
            self._emit(Quote(tuple(run)), None if first else run[0].gap)


# --------------------------------------------------------------------------- inlines

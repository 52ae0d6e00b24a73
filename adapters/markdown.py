"""One Markdown parse, rendered per platform: Slack mrkdwn, Telegram HTML and Discord.

The model answers in CommonMark-ish Markdown, but no chat platform renders exactly that:
Slack has its own *mrkdwn*, Telegram wants a small HTML subset (``parse_mode=HTML``) and
Discord renders most Markdown but pings a whole server for ``@everyone``. So a reply is
parsed once into a tiny AST and rendered per platform, with each platform's escaping done
in one place: text the model wrote can never become a Slack ``<!channel>``, a Telegram tag
or a Discord mass mention.

The parser knows only what a chat model emits. Blocks: paragraphs, ATX headings, fenced code
(with an optional language), bullet and numbered list items, block quotes and horizontal
rules. Inline: bold, italic, strike-through, code spans, links, ``<autolinks>`` and bare
URLs. Emphasis follows CommonMark's delimiter-run rules (flanking, the rule of three,
intraword ``_``), so ``snake_case`` and ``2 * 3 * 4`` stay text. Anything unclosed is plain
text, nothing inside code is interpreted, and no input makes the renderers raise: the work
is linear in the input, nesting is capped, and as a last resort the text is sent escaped.

Stdlib only, no I/O.
"""

from __future__ import annotations

import html
import re
import unicodedata
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import TypeAlias

__all__ = ["escape_slack", "to_discord", "to_slack_mrkdwn", "to_telegram_html"]

ZWSP = "\u200b"
RULE = "───"
# Deeper emphasis nesting than this is kept as literal markers (keeps rendering recursion
# shallow whatever the input).
_MAX_DEPTH = 16


# --------------------------------------------------------------------------- the AST


@dataclass(frozen=True)
class Text:
    """Plain text; ``raw`` is its source spelling (with backslash escapes) for Discord."""

    text: str
    raw: str


@dataclass(frozen=True)
class Code:
    """An inline code span; its text is never interpreted."""

    text: str


@dataclass(frozen=True)
class Strong:
    """Bold: ``**x**`` or ``__x__``."""

    children: tuple[Inline, ...]


@dataclass(frozen=True)
class Emph:
    """Italic: ``*x*`` or ``_x_`` (``marker`` is the character used)."""

    children: tuple[Inline, ...]
    marker: str


@dataclass(frozen=True)
class Strike:
    """Strike-through: ``~~x~~``."""

    children: tuple[Inline, ...]


@dataclass(frozen=True)
class Link:
    """``[text](url)`` with an http(s) or mailto URL."""

    children: tuple[Inline, ...]
    url: str


@dataclass(frozen=True)
class AutoLink:
    """A bare URL or ``<url>``; ``raw`` is how it was written."""

    url: str
    raw: str


Inline: TypeAlias = Text | Code | Strong | Emph | Strike | Link | AutoLink


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


def _parse(markdown: str) -> list[Block]:
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
                    self._emit(Heading(len(heading.group(1)), _parse_inlines(content)))
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
        inlines = _parse_inlines("\n".join(self.leaf))
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

_ASCII_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_SPECIAL = re.compile(r"[\\`<\[!*_~]|(?<![A-Za-z0-9])(?i:https?)://")
_BARE_URL = re.compile(r"(?i:https?)://[^\s<>`\"]+")
_AUTOLINK = re.compile(r"<((?i:https?|mailto):[^\s<>]*)>")
_SAFE_URL = re.compile(r"^(?:(?i:https?)://[^\s/?#]|(?i:mailto):\S)")
_BRACKETED_URL = re.compile(r"<([^<>\n]*)>")
_TITLE = re.compile(r"\"[^\"]{0,500}\"|'[^']{0,500}'|\([^()]{0,500}\)")
_URL_TRAILING = frozenset("?!.,:;*_~'\"")


def _is_punct(ch: str) -> bool:
    return ch in _ASCII_PUNCT or unicodedata.category(ch)[0] in "PS"


@dataclass(eq=False)
class _Tok:
    """A node of the inline token list: finished nodes, or a delimiter run (``char`` set)."""

    nodes: tuple[Inline, ...] = ()
    char: str = ""
    count: int = 0
    orig: int = 0
    can_open: bool = False
    can_close: bool = False
    depth: int = 0
    prev: _Tok | None = None
    next: _Tok | None = None
    dprev: _Tok | None = None
    dnext: _Tok | None = None


def _text(text: str, raw: str | None = None) -> _Tok:
    return _Tok(nodes=(Text(text, text if raw is None else raw),))


def _finish(toks: Iterable[_Tok]) -> tuple[Inline, ...]:
    """Flatten tokens into nodes; leftover delimiters become text; adjacent texts merge."""
    out: list[Inline] = []
    texts: list[str] = []
    raws: list[str] = []

    def flush() -> None:
        if texts:
            out.append(Text("".join(texts), "".join(raws)))
            texts.clear()
            raws.clear()

    for tok in toks:
        nodes = (Text(tok.char * tok.count, tok.char * tok.count),) if tok.char else tok.nodes
        for node in nodes:
            if isinstance(node, Text):
                texts.append(node.text)
                raws.append(node.raw)
            else:
                flush()
                out.append(node)
    flush()
    return tuple(out)


class _Backticks:
    """Backtick runs of a string, to find a code span's closing run in O(log n)."""

    def __init__(self, s: str) -> None:
        self.by_length: dict[int, list[int]] = {}
        for m in re.finditer(r"`+", s):
            self.by_length.setdefault(m.end() - m.start(), []).append(m.start())

    def closer(self, start: int, length: int) -> int | None:
        starts = self.by_length.get(length, [])
        k = bisect_right(starts, start)
        return starts[k] if k < len(starts) else None


def _bracket_matches(s: str, ticks: _Backticks) -> dict[int, int]:
    """Map each ``[`` to its matching ``]``, skipping escapes and code spans."""
    matches: dict[int, int] = {}
    stack: list[int] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            i += 2
        elif c == "`":
            j = i
            while j < n and s[j] == "`":
                j += 1
            close = ticks.closer(i, j - i)
            i = j if close is None else close + (j - i)
        elif c == "[":
            stack.append(i)
            i += 1
        elif c == "]":
            if stack:
                matches[stack.pop()] = i
            i += 1
        else:
            i += 1
    return matches


def _unescape(s: str) -> str:
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", s)


def _link_destination(s: str, k: int) -> tuple[str, int] | None:
    """Parse ``url "title")`` starting after ``](``; return the URL and the end index."""
    n = len(s)
    while k < n and s[k] in " \t\n":
        k += 1
    if k < n and s[k] == "<":
        bracketed = _BRACKETED_URL.match(s, k)
        if bracketed is None:
            return None
        url, k = bracketed.group(1), bracketed.end()
    else:
        start, depth = k, 0
        while k < n:
            c = s[k]
            if c == "\\" and k + 1 < n and s[k + 1] in _ASCII_PUNCT:
                k += 2
                continue
            if c.isspace() or ord(c) < 0x20:
                break
            if c == "(":
                depth += 1
                if depth > 32:
                    return None
            elif c == ")":
                if depth == 0:
                    break
                depth -= 1
            k += 1
        if depth:
            return None
        url = _unescape(s[start:k])
    while k < n and s[k] in " \t\n":
        k += 1
    if k < n and s[k] in "\"'(":
        title = _TITLE.match(s, k)
        if title is None:
            return None
        k = title.end()
        while k < n and s[k] in " \t\n":
            k += 1
    if k < n and s[k] == ")":
        return url, k + 1
    return None


def _bare_url(s: str, i: int) -> str | None:
    m = _BARE_URL.match(s, i)
    if m is None:
        return None
    url = m.group()
    while url:
        last = url[-1]
        if (
            last in _URL_TRAILING
            or (last == ")" and url.count(")") > url.count("("))
            or (last == "]" and url.count("]") > url.count("["))
        ):
            url = url[:-1]
        else:
            break
    return url if _SAFE_URL.match(url) else None


def _parse_inlines(s: str, *, allow_links: bool = True, level: int = 0) -> tuple[Inline, ...]:
    """Tokenize ``s`` and match emphasis (CommonMark's delimiter algorithm, simplified)."""
    ticks = _Backticks(s)
    brackets = _bracket_matches(s, ticks) if allow_links else {}
    toks: list[_Tok] = []
    i, n = 0, len(s)
    while i < n:
        m = _SPECIAL.search(s, i)
        if m is None:
            toks.append(_text(s[i:]))
            break
        j = m.start()
        if j > i:
            toks.append(_text(s[i:j]))
        c = s[j]
        i = j + 1
        if c == "\\":
            if j + 1 < n and s[j + 1] in _ASCII_PUNCT:
                toks.append(_text(s[j + 1], s[j : j + 2]))
                i = j + 2
            else:
                toks.append(_text("\\"))
        elif c == "`":
            k = j
            while k < n and s[k] == "`":
                k += 1
            close = ticks.closer(j, k - j)
            if close is None:
                toks.append(_text(s[j:k]))
                i = k
            else:
                toks.append(_Tok(nodes=(Code(_code_text(s[k:close])),)))
                i = close + (k - j)
        elif c == "<":
            auto = _AUTOLINK.match(s, j) if allow_links else None
            if auto and _SAFE_URL.match(auto.group(1)):
                toks.append(_Tok(nodes=(AutoLink(auto.group(1), auto.group()),)))
                i = auto.end()
            else:
                toks.append(_text("<"))
        elif c in "[!":
            start = j + 1 if c == "!" else j
            link = _link(s, start, brackets, level) if allow_links else None
            if link is None:
                toks.append(_text(c))
            else:
                toks.append(link[0])
                i = link[1]
        elif c in "*_~":
            k = j
            while k < n and s[k] == c:
                k += 1
            toks.append(_delimiter(s, j, k))
            i = k
        else:
            url = _bare_url(s, j) if allow_links else None
            if url is None:
                toks.append(_text(c))
            else:
                toks.append(_Tok(nodes=(AutoLink(url, url),)))
                i = j + len(url)
    head, tail = _Tok(), _Tok()
    chain = [head, *toks, tail]
    for a, b in pairwise(chain):
        a.next, b.prev = b, a
    delims = [t for t in toks if t.char]
    for a, b in pairwise(delims):
        a.dnext, b.dprev = b, a
    _process_emphasis(delims[0] if delims else None)
    out: list[_Tok] = []
    tok = head.next
    while tok is not None and tok is not tail:
        out.append(tok)
        tok = tok.next
    return _finish(out)


def _code_text(content: str) -> str:
    content = content.replace("\n", " ")
    if len(content) >= 2 and content[0] == content[-1] == " " and content.strip(" "):
        content = content[1:-1]
    return content


def _link(s: str, start: int, brackets: dict[int, int], level: int) -> tuple[_Tok, int] | None:
    """A ``[text](url)`` (or ``![alt](url)``) link at ``start``, if there is a safe one."""
    close = brackets.get(start)
    if close is None or close + 1 >= len(s) or s[close + 1] != "(":
        return None
    dest = _link_destination(s, close + 2)
    if dest is None:
        return None
    url, end = dest
    if not _SAFE_URL.match(url) or any(ch.isspace() or ord(ch) < 0x20 for ch in url):
        return None
    children = _parse_inlines(s[start + 1 : close], allow_links=False, level=level + 1)
    return _Tok(nodes=(Link(children, url),), depth=1), end


def _delimiter(s: str, start: int, end: int) -> _Tok:
    """A run of ``*``, ``_`` or ``~`` (CommonMark's left/right-flanking rules)."""
    char, count = s[start], end - start
    if char == "~" and count != 2:
        return _text(s[start:end])
    before = s[start - 1] if start > 0 else " "
    after = s[end] if end < len(s) else " "
    left = not after.isspace() and (not _is_punct(after) or before.isspace() or _is_punct(before))
    right = not before.isspace() and (not _is_punct(before) or after.isspace() or _is_punct(after))
    if char == "_":
        can_open = left and (not right or _is_punct(before))
        can_close = right and (not left or _is_punct(after))
    else:
        can_open, can_close = left, right
    if not (can_open or can_close):
        return _text(s[start:end])
    return _Tok(char=char, count=count, orig=count, can_open=can_open, can_close=can_close)


def _drop_delimiter(tok: _Tok) -> None:
    if tok.dprev is not None:
        tok.dprev.dnext = tok.dnext
    if tok.dnext is not None:
        tok.dnext.dprev = tok.dprev
    tok.dprev = tok.dnext = None


def _unlink(tok: _Tok) -> None:
    if tok.prev is not None:
        tok.prev.next = tok.next
    if tok.next is not None:
        tok.next.prev = tok.prev


def _compatible(opener: _Tok, closer: _Tok) -> bool:
    if opener.char == "~":
        return opener.count == 2 and closer.count == 2
    odd = (
        (closer.can_open or opener.can_close)
        and closer.orig % 3 != 0
        and (opener.orig + closer.orig) % 3 == 0
    )
    return not odd


def _process_emphasis(first: _Tok | None) -> None:
    """Pair openers with closers, innermost first, as CommonMark's ``process emphasis``."""
    bottoms: dict[tuple[str, bool, int], _Tok | None] = {}
    closer = first
    while closer is not None:
        if not closer.can_close:
            closer = closer.dnext
            continue
        key = (closer.char, closer.can_open, closer.orig % 3)
        stop = bottoms.get(key)
        opener = closer.dprev
        while opener is not None and opener is not stop:
            if opener.char == closer.char and opener.can_open and _compatible(opener, closer):
                break
            opener = opener.dprev
        if opener is None or opener is stop:
            bottoms[key] = closer.dprev
            following = closer.dnext
            if not closer.can_open:
                _drop_delimiter(closer)
            closer = following
            continue
        closer = _wrap(opener, closer)


def _wrap(opener: _Tok, closer: _Tok) -> _Tok | None:
    """Turn the tokens between a matched pair into one node; return the next closer."""
    char = opener.char
    use = 2 if char == "~" or (opener.count >= 2 and closer.count >= 2) else 1
    opener.count -= use
    closer.count -= use
    between = closer.dprev
    while between is not None and between is not opener:
        earlier = between.dprev
        _drop_delimiter(between)
        between = earlier
    inner: list[_Tok] = []
    tok = opener.next
    while tok is not None and tok is not closer:
        inner.append(tok)
        tok = tok.next
    children = _finish(inner)
    depth = 1 + max((t.depth for t in inner), default=0)
    if depth > _MAX_DEPTH:
        marker = Text(char * use, char * use)
        new = _Tok(nodes=(marker, *children, marker), depth=depth - 1)
    elif char == "~":
        new = _Tok(nodes=(Strike(children),), depth=depth)
    elif use == 2:
        new = _Tok(nodes=(Strong(children),), depth=depth)
    else:
        new = _Tok(nodes=(Emph(children, char),), depth=depth)
    opener.next, new.prev, new.next, closer.prev = new, opener, closer, new
    following: _Tok | None = closer
    if opener.count == 0:
        _drop_delimiter(opener)
        _unlink(opener)
    if closer.count == 0:
        following = closer.dnext
        _drop_delimiter(closer)
        _unlink(closer)
    return following


def _plain(nodes: Iterable[Inline]) -> str:
    """The visible text of inline nodes, without any markup."""
    parts: list[str] = []
    for node in nodes:
        if isinstance(node, Text | Code):
            parts.append(node.text)
        elif isinstance(node, AutoLink):
            parts.append(node.url)
        else:
            parts.append(_plain(node.children))
    return "".join(parts)


# --------------------------------------------------------------------------- rendering


def _join(blocks: Sequence[Block], render: Callable[[Block], str]) -> str:
    parts: list[str] = []
    for index, block in enumerate(blocks):
        if index:
            parts.append("\n\n" if block.gap else "\n")
        parts.append(render(block))
    return "".join(parts)


def _list_marker(item: ListItem, bullet: str) -> str:
    return "  " * item.depth + (f"{item.number}. " if item.ordered else bullet)


def _break_fences(code: str) -> str:
    """Keep ``` inside a code block from closing our fence early (a zero-width space)."""
    return code.replace("```", f"`{ZWSP}``")


def _prefix_lines(text: str, prefix: str) -> str:
    return "\n".join(prefix + line if line else prefix.rstrip() for line in text.split("\n"))


# Slack ----------------------------------------------------------------------------


def escape_slack(text: str) -> str:
    """Escape the three characters Slack's mrkdwn treats as control: ``& < >``."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_url(url: str) -> str:
    encoded = url.replace("|", "%7C").replace("<", "%3C").replace(">", "%3E")
    return encoded.replace("&", "&amp;")


def _wrap_lines(marker: str, text: str) -> str:
    """Wrap each line's text in ``marker``: Slack's styles do not span line breaks."""
    lines = []
    for line in text.split("\n"):
        core = line.strip()
        if core:
            lead = line[: len(line) - len(line.lstrip())]
            trail = line[len(line.rstrip()) :]
            line = f"{lead}{marker}{core}{marker}{trail}"
        lines.append(line)
    return "\n".join(lines)


def _slack_inlines(nodes: Iterable[Inline], in_bold: bool = False) -> str:
    parts: list[str] = []
    for node in nodes:
        if isinstance(node, Text):
            parts.append(escape_slack(node.text))
        elif isinstance(node, Code):
            # mrkdwn has no longer code fences: a code span holding a backtick stays text.
            code = escape_slack(node.text)
            parts.append(code if "`" in code else f"`{code}`")
        elif isinstance(node, Strong):
            inner = _slack_inlines(node.children, True)
            parts.append(inner if in_bold else _wrap_lines("*", inner))
        elif isinstance(node, Emph):
            parts.append(_wrap_lines("_", _slack_inlines(node.children, in_bold)))
        elif isinstance(node, Strike):
            parts.append(_wrap_lines("~", _slack_inlines(node.children, in_bold)))
        elif isinstance(node, Link):
            label = " ".join(_plain(node.children).split())
            url = _slack_url(node.url)
            parts.append(f"<{url}|{escape_slack(label)}>" if label else f"<{url}>")
        else:
            parts.append(f"<{_slack_url(node.url)}>")
    return "".join(parts)


def _slack_block(block: Block) -> str:
    if isinstance(block, Paragraph):
        return _slack_inlines(block.inlines)
    if isinstance(block, Heading):
        return _wrap_lines("*", _slack_inlines(block.inlines, in_bold=True))
    if isinstance(block, CodeBlock):
        return f"```\n{escape_slack(_break_fences(block.code))}\n```"
    if isinstance(block, ListItem):
        return _list_marker(block, "• ") + _slack_inlines(block.inlines)
    if isinstance(block, Quote):
        return _prefix_lines(_join(block.blocks, _slack_block), "> ")
    return RULE


def to_slack_mrkdwn(markdown: str) -> str:
    """Render Markdown as Slack mrkdwn; all model text is escaped, so it cannot mention."""
    try:
        return _join(_parse(markdown), _slack_block)
    except Exception:  # never fail a reply over formatting
        return escape_slack(markdown)


# Telegram -------------------------------------------------------------------------


def _esc(text: str) -> str:
    return html.escape(text, quote=False)


def _telegram_inlines(nodes: Iterable[Inline], in_bold: bool = False) -> str:
    parts: list[str] = []
    for node in nodes:
        if isinstance(node, Text):
            parts.append(_esc(node.text))
        elif isinstance(node, Code):
            parts.append(f"<code>{_esc(node.text)}</code>")
        elif isinstance(node, Strong):
            inner = _telegram_inlines(node.children, True)
            parts.append(inner if in_bold else f"<b>{inner}</b>")
        elif isinstance(node, Emph):
            parts.append(f"<i>{_telegram_inlines(node.children, in_bold)}</i>")
        elif isinstance(node, Strike):
            parts.append(f"<s>{_telegram_inlines(node.children, in_bold)}</s>")
        elif isinstance(node, Link) and node.url[:7].lower() == "mailto:":
            # Telegram's <a> takes web and tg: URLs; it recognises addresses in text itself.
            label, address = _plain(node.children).strip(), node.url[7:]
            text = address if label in ("", address, node.url) else f"{label} ({address})"
            parts.append(_esc(text))
        elif isinstance(node, Link):
            label = _telegram_inlines(node.children, in_bold) or _esc(node.url)
            parts.append(f'<a href="{html.escape(node.url, quote=True)}">{label}</a>')
        else:
            parts.append(_esc(node.url))  # Telegram links bare URLs itself
    return "".join(parts)


def _telegram_block(block: Block) -> str:
    if isinstance(block, Paragraph):
        return _telegram_inlines(block.inlines)
    if isinstance(block, Heading):
        return f"<b>{_telegram_inlines(block.inlines, in_bold=True)}</b>"
    if isinstance(block, CodeBlock):
        if block.lang:
            lang = html.escape(block.lang, quote=True)
            return f'<pre><code class="language-{lang}">{_esc(block.code)}</code></pre>'
        return f"<pre>{_esc(block.code)}</pre>"
    if isinstance(block, ListItem):
        return _list_marker(block, "• ") + _telegram_inlines(block.inlines)
    if isinstance(block, Quote):
        return f"<blockquote>{_join(block.blocks, _telegram_block)}</blockquote>"
    return RULE


def _render_telegram(markdown: str) -> str:
    return _join(_parse(markdown), _telegram_block)


def to_telegram_html(markdown: str) -> str:
    """Render Markdown as Telegram's HTML subset: escaped text, well-nested tags."""
    try:
        return _render_telegram(markdown)
    except Exception:  # never fail a reply over formatting
        return _esc(markdown)


# Discord --------------------------------------------------------------------------

_MASS_MENTION = re.compile(r"@(everyone|here)", re.IGNORECASE)
_ROLE_MENTION = re.compile(r"<@&")


def _neutralise(text: str) -> str:
    """Break ``@everyone``, ``@here`` and ``<@&role>`` with a zero-width space."""
    text = _MASS_MENTION.sub(lambda m: f"@{ZWSP}{m.group(1)}", text)
    return _ROLE_MENTION.sub(f"<@{ZWSP}&", text)


def _discord_code_span(text: str) -> str:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    if longest:  # our fence and Discord's might disagree: keep mentions harmless
        text = _neutralise(text)
    if text.startswith("`") or text.endswith("`"):
        text = f" {text} "
    fence = "`" * (longest + 1)
    return f"{fence}{text}{fence}"


def _discord_url(url: str) -> str:
    return _neutralise(url.replace("(", "%28").replace(")", "%29"))


def _discord_inlines(nodes: Iterable[Inline], in_bold: bool = False) -> str:
    parts: list[str] = []
    for node in nodes:
        if isinstance(node, Text):
            parts.append(_neutralise(node.raw))
        elif isinstance(node, Code):
            parts.append(_discord_code_span(node.text))
        elif isinstance(node, Strong):
            inner = _discord_inlines(node.children, True)
            parts.append(inner if in_bold else f"**{inner}**")
        elif isinstance(node, Emph):
            parts.append(f"{node.marker}{_discord_inlines(node.children, in_bold)}{node.marker}")
        elif isinstance(node, Strike):
            parts.append(f"~~{_discord_inlines(node.children, in_bold)}~~")
        elif isinstance(node, Link):
            label = _discord_inlines(node.children, in_bold) or _neutralise(node.url)
            parts.append(f"[{label}]({_discord_url(node.url)})")
        else:
            parts.append(_neutralise(node.raw))
    return "".join(parts)


def _discord_block(block: Block) -> str:
    if isinstance(block, Paragraph):
        return _discord_inlines(block.inlines)
    if isinstance(block, Heading):
        if block.level <= 3:  # Discord renders #, ## and ### only
            return "#" * block.level + " " + _discord_inlines(block.inlines)
        return f"**{_discord_inlines(block.inlines, in_bold=True)}**"
    if isinstance(block, CodeBlock):
        return f"```{block.lang}\n{_break_fences(block.code)}\n```"
    if isinstance(block, ListItem):
        return _list_marker(block, "- ") + _discord_inlines(block.inlines)
    if isinstance(block, Quote):
        return _prefix_lines(_join(block.blocks, _discord_block), "> ")
    return RULE


def to_discord(markdown: str) -> str:
    """Keep Markdown for Discord, but neutralise mass and role mentions outside code."""
    try:
        return _join(_parse(markdown), _discord_block)
    except Exception:  # never fail a reply over formatting
        return _neutralise(markdown)

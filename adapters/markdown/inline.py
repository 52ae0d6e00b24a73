"""Markdown inline syntax: the nodes (text, code, bold, italic, strike, links) and the
parser that turns a block's text into them.

Emphasis follows CommonMark's delimiter-run rules (flanking, the rule of three, intraword
``_``), so ``snake_case`` and ``2 * 3 * 4`` stay text. Anything unclosed is plain text,
nothing inside code is interpreted, the work is linear in the input and nesting is capped.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise
from typing import TypeAlias

ZWSP = "\u200b"
# Deeper emphasis nesting than this is kept as literal markers (keeps rendering recursion
# shallow whatever the input).
_MAX_DEPTH = 16


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


def parse_inlines(s: str, *, allow_links: bool = True, level: int = 0) -> tuple[Inline, ...]:
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
    children = parse_inlines(s[start + 1 : close], allow_links=False, level=level + 1)
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


def plain(nodes: Iterable[Inline]) -> str:
    """The visible text of inline nodes, without any markup."""
    parts: list[str] = []
    for node in nodes:
        if isinstance(node, Text | Code):
            parts.append(node.text)
        elif isinstance(node, AutoLink):
            parts.append(node.url)
        else:
            parts.append(plain(node.children))
    return "".join(parts)

"""Splitting rendered replies under a platform's limit without breaking what they mean."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from html.parser import HTMLParser

import pytest

from adapters.chunking import DISCORD_LIMIT, SLACK_LIMIT, TELEGRAM_LIMIT, split_message
from adapters.markdown import to_discord, to_slack_mrkdwn, to_telegram_html

WORDS = ["alpha", "beta", "gamma", "delta", "<tag>", "&", "a&b", "x<y", "more", "words"]
WORDS += ["here", "@everyone", "**bold**", "_it_"]


def _prose(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def _code(rng: random.Random, lines: int, lang: str) -> str:
    body = "\n".join(f"    v{i} = {i} & {i} < {i + 1}  # {_prose(rng, 4)}" for i in range(lines))
    return f"```{lang}\n{body}\n```"


def _long_reply() -> str:
    """About 10,000 characters: headings, prose, lists, a quote and four code blocks."""
    rng = random.Random(7)
    parts = [
        "# Report",
        _prose(rng, 90),
        _code(rng, 8, "python"),
        _prose(rng, 160),
        "- " + _prose(rng, 25) + "\n- " + _prose(rng, 30) + "\n  - " + _prose(rng, 10),
        _code(rng, 110, "sh"),  # longer than every platform's limit
        "> " + _prose(rng, 40) + "\n> " + _prose(rng, 20),
        _code(rng, 4, ""),
        "## Links",
        _prose(rng, 60) + " [the docs](https://docs.example/a?b=1&c=2) " + _prose(rng, 30),
        _code(rng, 40, "js"),
        _prose(rng, 90),
    ]
    return "\n\n".join(parts)


def _fence_lines(text: str) -> int:
    return sum(1 for line in text.split("\n") if line.startswith("```"))


def _content(text: str, *, html: bool) -> str:
    """Non-whitespace content, without fence lines (markdown) or tags (HTML)."""
    text = re.sub(r"<[^<>]*>", "", text) if html else re.sub(r"(?m)^```.*$", "", text)
    return re.sub(r"\s+", "", text)


class _Balance(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.ok = True

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self.stack and self.stack[-1] == tag:
            self.stack.pop()
        else:
            self.ok = False


def _well_formed(chunk: str) -> bool:
    parser = _Balance()
    parser.feed(chunk)
    parser.close()
    return parser.ok and not parser.stack


@pytest.mark.parametrize(
    ("render", "limit", "html"),
    [
        pytest.param(to_slack_mrkdwn, SLACK_LIMIT, False, id="slack"),
        pytest.param(to_telegram_html, TELEGRAM_LIMIT, True, id="telegram"),
        pytest.param(to_discord, DISCORD_LIMIT, False, id="discord"),
    ],
)
def test_a_long_reply_splits_into_valid_chunks_for_every_platform(
    render: Callable[[str], str], limit: int, html: bool
) -> None:
    """Each chunk fits, is non-empty, holds whole code blocks, and nothing is lost."""
    source = _long_reply()
    assert 9_500 <= len(source) <= 11_000
    rendered = render(source)
    chunks = split_message(rendered, limit)
    assert len(chunks) >= 3
    for chunk in chunks:
        assert 0 < len(chunk) <= limit
        assert chunk.strip()
        assert chunk == chunk.strip("\n")
        if html:
            assert _well_formed(chunk), chunk
            assert len(re.findall(r"<pre[ >]", chunk)) == chunk.count("</pre>")
            assert not re.search(r"<pre>(<code[^>]*>)?\s*(</code>)?</pre>", chunk)
        else:
            assert _fence_lines(chunk) % 2 == 0, chunk
            assert not re.search(r"(?m)^```\w*\n```$", chunk)  # no empty code block
    assert _content("\n".join(chunks), html=html) == _content(rendered, html=html)
    # The 110-line block is longer than the limit, so it was closed and reopened.
    reopened = '<pre><code class="language-sh">' if html else ("```sh" if limit < 3000 else "```")
    assert sum(chunk.startswith(reopened) for chunk in chunks) >= 2


def test_text_that_fits_is_returned_unchanged() -> None:
    """Up to the limit (inclusive) the text comes back as is, whitespace and all."""
    assert split_message("  hi\n\n", 100) == ["  hi\n\n"]
    exact = "x" * 100
    assert split_message(exact, 100) == [exact]
    assert split_message("", 100) == [""]


@pytest.mark.parametrize("limit", [99, 50, 0, -1])
def test_a_limit_below_100_is_rejected(limit: int) -> None:
    """Too small to hold a reopened code fence plus content."""
    with pytest.raises(ValueError, match="at least 100"):
        split_message("x" * 500, limit)


def test_platform_limits() -> None:
    """Slack's guidance (~4,000, with margin), Telegram's 4096, Discord's 2000."""
    assert (SLACK_LIMIT, TELEGRAM_LIMIT, DISCORD_LIMIT) == (3900, 4096, 2000)


def test_a_paragraph_break_is_preferred_to_a_later_line_break() -> None:
    """The blank line at 60 wins over the line break at 78 and the spaces after it."""
    first = "alpha " * 10
    second = "line one of two\n" + "beta " * 30
    chunks = split_message(first.strip() + "\n\n" + second, 100)
    assert chunks[0] == first.strip()
    assert chunks[1] == "line one of two"


def test_a_line_break_is_preferred_to_a_space() -> None:
    """The newline at 50 wins over the space at 81."""
    text = "x" * 50 + "\n" + "y" * 30 + " " + "z" * 100
    assert split_message(text, 100) == ["x" * 50, "y" * 30, "z" * 100]


def test_a_space_is_preferred_to_a_hard_cut() -> None:
    """No line breaks: cut at the last space, which goes away."""
    assert split_message("w" * 60 + " " + "v" * 60, 100) == ["w" * 60, "v" * 60]


def test_without_spaces_the_text_is_cut_hard() -> None:
    """One long word: cut at the limit."""
    assert split_message("q" * 250, 100) == ["q" * 100, "q" * 100, "q" * 50]


def test_no_cut_inside_an_entity() -> None:
    """The hard cut at 100 would split &amp; (97-102): it moves before it."""
    text = "a" * 97 + "&amp;" + "b" * 200
    chunks = split_message(text, 100)
    assert chunks[0] == "a" * 97
    assert chunks[1].startswith("&amp;b")
    assert "".join(chunks) == text


def test_no_cut_inside_a_slack_link_or_mention() -> None:
    """<https://x|y> and <@U123> tokens stay whole."""
    link = "<https://x.example/y|y>"
    text = "x" * 90 + link + "z" * 100
    chunks = split_message(text, 100)
    assert chunks[0] == "x" * 90
    assert chunks[1].startswith(link)
    assert "".join(chunks) == text
    mention = "<@U0123456>"
    chunks = split_message("m" * 95 + mention + "n" * 100, 100)
    assert chunks[0] == "m" * 95
    assert chunks[1].startswith(mention)


def test_no_cut_inside_an_html_tag_or_a_short_link() -> None:
    """Telegram: a tag is never cut, nor a short link at the space in its text."""
    link = '<a href="https://x.example/?a=1&amp;b=2">the docs</a>'
    text = "<b>x</b>" + "x" * 40 + link + "y" * 100
    chunks = split_message(text, 100)
    assert chunks[0] == "<b>x</b>" + "x" * 40
    assert chunks[1].startswith(link)
    tag = '<a href="https://x.example/' + "p" * 40 + '">'
    chunks = split_message("z" * 80 + tag + "docs</a>" + "y" * 100, 100)
    assert chunks[0] == "z" * 80
    assert chunks[1].startswith(tag)


def test_a_split_code_block_is_closed_and_reopened() -> None:
    """Each chunk is a valid message: the fence (with its language) is repeated."""
    code = "\n".join(f"value_{i:02d} = {i}" for i in range(12))
    text = f"Intro line.\n\n```python\n{code}\n```\nDone."
    assert split_message(text, 100) == [
        "Intro line.",
        "```python\nvalue_00 = 0\nvalue_01 = 1\nvalue_02 = 2\nvalue_03 = 3\nvalue_04 = 4\n"
        "value_05 = 5\n```",
        "```python\nvalue_06 = 6\nvalue_07 = 7\nvalue_08 = 8\nvalue_09 = 9\nvalue_10 = 10\n"
        "value_11 = 11\n```\nDone.",
    ]


def test_an_unclosed_block_is_closed_in_every_chunk_but_the_last() -> None:
    """The last chunk mirrors the (unclosed) original."""
    text = "```\n" + "\n".join(f"line {i}" for i in range(30))
    chunks = split_message(text, 100)
    assert chunks == [
        "```\n" + "\n".join(f"line {i}" for i in range(12)) + "\n```",
        "```\n" + "\n".join(f"line {i}" for i in range(12, 23)) + "\n```",
        "```\n" + "\n".join(f"line {i}" for i in range(23, 30)),
    ]


def test_telegram_pre_blocks_are_closed_and_reopened() -> None:
    """</code></pre> at the end of a chunk, <pre><code class=...> at the next one's start."""
    code = "\n".join(f"x{i} = {i} &lt; {i + 1}" for i in range(12))
    text = f'<pre><code class="language-py">{code}</code></pre>'
    open_, close = '<pre><code class="language-py">', "</code></pre>"
    assert split_message(text, 100) == [
        open_ + "x0 = 0 &lt; 1\nx1 = 1 &lt; 2\nx2 = 2 &lt; 3\nx3 = 3 &lt; 4" + close,
        open_ + "x4 = 4 &lt; 5\nx5 = 5 &lt; 6\nx6 = 6 &lt; 7\nx7 = 7 &lt; 8" + close,
        open_ + "x8 = 8 &lt; 9\nx9 = 9 &lt; 10\nx10 = 10 &lt; 11" + close,
        open_ + "x11 = 11 &lt; 12" + close,
    ]


def test_telegram_elements_open_at_a_cut_are_closed_and_reopened() -> None:
    """A long quote becomes several quotes, each well-formed."""
    words = " ".join(f"word{i}" for i in range(30))
    chunks = split_message(f"<b>Title</b>\n\n<blockquote>{words}</blockquote>", 100)
    assert chunks == [
        "<b>Title</b>",
        "<blockquote>" + " ".join(f"word{i}" for i in range(12)) + "</blockquote>",
        "<blockquote>" + " ".join(f"word{i}" for i in range(12, 22)) + "</blockquote>",
        "<blockquote>" + " ".join(f"word{i}" for i in range(22, 30)) + "</blockquote>",
    ]


def test_chunks_are_stripped_of_blank_lines_and_never_empty() -> None:
    """Runs of blank lines at a cut vanish; code indentation is kept."""
    text = "\n\n\n" + "a " * 40 + "\n\n\n\n   \n" + "```\n" + "    indented\n" * 10 + "```\n\n\n"
    chunks = split_message(text, 100)
    assert chunks[0] == ("a " * 40).strip()
    assert chunks[1].startswith("```\n    indented\n")
    assert all(chunk and chunk == chunk.strip("\n") for chunk in chunks)
    assert split_message(" \n" * 200, 100) == []


def test_markup_is_detected_outside_code_blocks() -> None:
    """A Discord reply showing HTML in a ```html block is still split as Markdown."""
    code = "\n".join(f"<b>row {i}</b>" for i in range(15))
    text = f"```html\n{code}\n```"
    chunks = split_message(text, 100)
    assert all(chunk.startswith("```html\n") and chunk.endswith("\n```") for chunk in chunks)
    assert split_message(text, 100, markup="markdown") == chunks
    as_html = split_message(text, 100, markup="html")
    assert as_html != chunks
    assert all(_well_formed(chunk) for chunk in as_html)


FRAGMENTS = [
    "word ", "more words ", "\n", "\n\n", "**b** ", "_i_ ", "`c` ", "<x> ", "& ", "@everyone ",
    "[l](https://e.example/a?b=1&c=2) ", "> q ", "- item ", "1. n ", "# H\n", "\n```py\n",
    "\n```\n", "code line\n", "    indented\n", "x" * 50,
]  # fmt: skip


@pytest.mark.parametrize(
    ("render", "html"),
    [(to_slack_mrkdwn, False), (to_telegram_html, True), (to_discord, False)],
    ids=["slack", "telegram", "discord"],
)
def test_random_replies_always_split_into_valid_chunks(
    render: Callable[[str], str], html: bool
) -> None:
    """Random replies at random limits: every invariant holds for every chunk."""
    rng = random.Random(99)
    for _ in range(300):
        rendered = render("".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(10, 300))))
        limit = rng.randint(100, 400)
        chunks = split_message(rendered, limit)
        if len(rendered) <= limit:
            assert chunks == [rendered]
            continue
        for chunk in chunks:
            assert 0 < len(chunk) <= limit
            assert chunk.strip()
            assert chunk == chunk.strip("\n")
            assert _well_formed(chunk) if html else _fence_lines(chunk) % 2 == 0, chunk
        assert _content("\n".join(chunks), html=html) == _content(rendered, html=html)

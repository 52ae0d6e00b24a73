"""One Markdown parse, three renderings: Slack mrkdwn, Telegram HTML, Discord Markdown."""

from __future__ import annotations

import random
import re
from html.parser import HTMLParser

import pytest

from adapters import markdown
from adapters.markdown import escape_slack, to_discord, to_slack_mrkdwn, to_telegram_html

Z = "\u200b"

# (markdown, slack, telegram, discord)
CONSTRUCTS = [
    pytest.param("**bold**", "*bold*", "<b>bold</b>", "**bold**", id="bold"),
    pytest.param("__bold__", "*bold*", "<b>bold</b>", "**bold**", id="bold-underscores"),
    pytest.param("*it*", "_it_", "<i>it</i>", "*it*", id="italic"),
    pytest.param("_it_", "_it_", "<i>it</i>", "_it_", id="italic-underscore"),
    pytest.param("~~gone~~", "~gone~", "<s>gone</s>", "~~gone~~", id="strike"),
    pytest.param("`x = 1`", "`x = 1`", "<code>x = 1</code>", "`x = 1`", id="code-span"),
    pytest.param(
        "[docs](https://a.example/d)",
        "<https://a.example/d|docs>",
        '<a href="https://a.example/d">docs</a>',
        "[docs](https://a.example/d)",
        id="link",
    ),
    pytest.param(
        "see https://a.example/x.",
        "see <https://a.example/x>.",
        "see https://a.example/x.",
        "see https://a.example/x.",
        id="bare-url",
    ),
    pytest.param(
        "<https://a.example/x>",
        "<https://a.example/x>",
        "https://a.example/x",
        "<https://a.example/x>",
        id="autolink",
    ),
    pytest.param("# Title", "*Title*", "<b>Title</b>", "# Title", id="heading"),
    pytest.param("### Sub ###", "*Sub*", "<b>Sub</b>", "### Sub", id="heading-closing-hashes"),
    pytest.param("#### Deep", "*Deep*", "<b>Deep</b>", "**Deep**", id="heading-level-4"),
    pytest.param("- a\n- b", "• a\n• b", "• a\n• b", "- a\n- b", id="bullets"),
    pytest.param("* a\n+ b", "• a\n• b", "• a\n• b", "- a\n- b", id="bullet-markers"),
    pytest.param(
        "- a\n  - b\n    - c", "• a\n  • b\n    • c", "• a\n  • b\n    • c", "- a\n  - b\n    - c",
        id="nested-bullets",
    ),
    pytest.param("1. one\n2) two", "1. one\n2. two", "1. one\n2. two", "1. one\n2. two",
                 id="numbered"),
    pytest.param(
        "> quoted\n> more",
        "> quoted\n> more",
        "<blockquote>quoted\nmore</blockquote>",
        "> quoted\n> more",
        id="quote",
    ),
    pytest.param(
        "> a\n> > nested", "> a\n> nested", "<blockquote>a\nnested</blockquote>", "> a\n> nested",
        id="nested-quote-flattened",
    ),
    pytest.param("a\n\n---\n\nb", "a\n\n───\n\nb", "a\n\n───\n\nb", "a\n\n───\n\nb", id="rule"),
    pytest.param("* * *", "───", "───", "───", id="rule-stars"),
    pytest.param(
        "```python\nprint(1)\n```",
        "```\nprint(1)\n```",
        '<pre><code class="language-python">print(1)</code></pre>',
        "```python\nprint(1)\n```",
        id="fenced-with-language",
    ),
    pytest.param(
        "```\nplain\n```", "```\nplain\n```", "<pre>plain</pre>", "```\nplain\n```", id="fenced"
    ),
    pytest.param(
        "~~~js\nx()\n~~~",
        "```\nx()\n```",
        '<pre><code class="language-js">x()</code></pre>',
        "```js\nx()\n```",
        id="tilde-fence",
    ),
    pytest.param(
        "1. step\n   ```sh\n   ls -l\n   ```",
        "1. step\n```\nls -l\n```",
        '1. step\n<pre><code class="language-sh">ls -l</code></pre>',
        "1. step\n```sh\nls -l\n```",
        id="fence-indented-in-a-list",
    ),
    pytest.param(
        "Intro\n\n## Steps\n1. a\n\nDone",
        "Intro\n\n*Steps*\n1. a\n\nDone",
        "Intro\n\n<b>Steps</b>\n1. a\n\nDone",
        "Intro\n\n## Steps\n1. a\n\nDone",
        id="blank-lines-kept-between-blocks",
    ),
    pytest.param("line one\nline two", "line one\nline two", "line one\nline two",
                 "line one\nline two", id="line-breaks-kept"),
]  # fmt: skip


@pytest.mark.parametrize(("source", "slack", "telegram", "discord"), CONSTRUCTS)
def test_each_construct_renders_for_each_platform(
    source: str, slack: str, telegram: str, discord: str
) -> None:
    """Every block and inline construct, exactly, per platform."""
    assert to_slack_mrkdwn(source) == slack
    assert to_telegram_html(source) == telegram
    assert to_discord(source) == discord


def test_escape_slack_escapes_exactly_three_characters() -> None:
    """& < > become entities; nothing else (quotes, *, _) is touched."""
    assert escape_slack("a < b & c > d \"'*_") == "a &lt; b &amp; c &gt; d \"'*_"
    assert escape_slack("&amp;") == "&amp;amp;"


@pytest.mark.parametrize(
    ("source", "slack", "telegram"),
    [
        ("a < b & c > d", "a &lt; b &amp; c &gt; d", "a &lt; b &amp; c &gt; d"),
        ("<!channel> hi", "&lt;!channel&gt; hi", "&lt;!channel&gt; hi"),
        ("ping <@U1>", "ping &lt;@U1&gt;", "ping &lt;@U1&gt;"),
        ("<!here|here>", "&lt;!here|here&gt;", "&lt;!here|here&gt;"),
        (
            "<script>alert('x')</script>",
            "&lt;script&gt;alert('x')&lt;/script&gt;",
            "&lt;script&gt;alert('x')&lt;/script&gt;",
        ),
        ("**<b>x</b>**", "*&lt;b&gt;x&lt;/b&gt;*", "<b>&lt;b&gt;x&lt;/b&gt;</b>"),
        ("&amp; stays literal", "&amp;amp; stays literal", "&amp;amp; stays literal"),
    ],
)
def test_model_text_is_escaped_for_slack_and_telegram(
    source: str, slack: str, telegram: str
) -> None:
    """The model cannot write a Slack mention/command token or a Telegram tag."""
    assert to_slack_mrkdwn(source) == slack
    assert to_telegram_html(source) == telegram


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("hey @everyone", f"hey @{Z}everyone"),
        ("@here and @Everyone", f"@{Z}here and @{Z}Everyone"),
        ("role <@&123456>", f"role <@{Z}&123456>"),
        ("**@everyone** _@here_", f"**@{Z}everyone** _@{Z}here_"),
        ("# @everyone", f"# @{Z}everyone"),
        ("> @here", f"> @{Z}here"),
        ("- <@&1>", f"- <@{Z}&1>"),
        ("[@everyone](https://x.example/@here)", f"[@{Z}everyone](https://x.example/@{Z}here)"),
        ("`@everyone` stays", "`@everyone` stays"),
        ("```\n@everyone <@&1>\n```", "```\n@everyone <@&1>\n```"),
        ("user <@42> stays", "user <@42> stays"),
        ("a < b & c > d", "a < b & c > d"),
    ],
)
def test_discord_neutralises_mass_mentions_outside_code(source: str, expected: str) -> None:
    """A zero-width space after @ (or before & of a role); code is left verbatim."""
    assert to_discord(source) == expected


def test_slack_and_telegram_do_not_touch_at_mentions() -> None:
    """@everyone is plain text in Slack and Telegram: no change is needed there."""
    assert to_slack_mrkdwn("@everyone") == "@everyone"
    assert to_telegram_html("@everyone") == "@everyone"


@pytest.mark.parametrize(
    ("source", "slack", "telegram", "discord"),
    [
        ("**bold *both* bold**", "*bold _both_ bold*", "<b>bold <i>both</i> bold</b>",
         "**bold *both* bold**"),
        ("***both***", "_*both*_", "<i><b>both</b></i>", "***both***"),
        ("*it **both** it*", "_it *both* it_", "<i>it <b>both</b> it</i>", "*it **both** it*"),
        ("_a **b ~~c~~**_", "_a *b ~c~*_", "<i>a <b>b <s>c</s></b></i>", "_a **b ~~c~~**_"),
        ("# A **b**", "*A b*", "<b>A b</b>", "# A **b**"),
    ],
)  # fmt: skip
def test_nested_styles(source: str, slack: str, telegram: str, discord: str) -> None:
    """Bold inside italic and the other way round; a heading's bold is not doubled."""
    assert to_slack_mrkdwn(source) == slack
    assert to_telegram_html(source) == telegram
    assert to_discord(source) == discord


@pytest.mark.parametrize(
    "source",
    [
        "**not closed",
        "*also open",
        "__half",
        "~~strike",
        "`code",
        "``code`",
        "[text](",
        "[text]",
        "a ** b",
        "2 * 3 * 4",
        "snake_case_name",
        "~5 minutes ~ish",
        "x**",
        "* ",
    ],
)
def test_unclosed_and_unmatched_markers_are_plain_text(source: str) -> None:
    """Nothing to pair with: the characters stay as written (Discord: verbatim)."""
    expected = escape_slack(source).strip()
    assert to_slack_mrkdwn(source) == expected
    assert to_telegram_html(source) == expected
    assert to_discord(source) == source.strip()


def test_backslash_escapes_make_markers_literal() -> None:
    """\\* is a star, not emphasis; Discord keeps the escape so it stays literal there."""
    assert to_telegram_html(r"\*not it\* \[x](y)") == "*not it* [x](y)"
    assert to_discord(r"\*not it\*") == r"\*not it\*"


def test_intraword_emphasis_follows_commonmark() -> None:
    """Stars work inside words, underscores do not."""
    assert to_telegram_html("un*frigging*believable") == "un<i>frigging</i>believable"
    assert to_telegram_html("foo_bar_baz") == "foo_bar_baz"


def test_code_content_is_never_interpreted() -> None:
    """Inside code **x**, [a](b) and URLs stay literal; & < > are escaped for the platform."""
    source = "`**x** [a](https://b.example) <c> & d`"
    assert to_slack_mrkdwn(source) == "`**x** [a](https://b.example) &lt;c&gt; &amp; d`"
    assert to_telegram_html(source) == (
        "<code>**x** [a](https://b.example) &lt;c&gt; &amp; d</code>"
    )
    assert to_discord(source) == source
    block = "```html\n**x** <b>&amp;</b> <!channel>\n# not a heading\n- not a list\n```"
    assert to_slack_mrkdwn(block) == (
        "```\n**x** &lt;b&gt;&amp;amp;&lt;/b&gt; &lt;!channel&gt;\n# not a heading\n"
        "- not a list\n```"
    )
    assert to_telegram_html(block) == (
        '<pre><code class="language-html">**x** &lt;b&gt;&amp;amp;&lt;/b&gt; &lt;!channel&gt;\n'
        "# not a heading\n- not a list</code></pre>"
    )
    assert to_discord(block) == block


def test_an_unclosed_fence_runs_to_the_end() -> None:
    """A reply cut off mid-code still renders as code (and is closed)."""
    assert to_slack_mrkdwn("text\n```py\nx = '**'") == "text\n```\nx = '**'\n```"
    assert to_telegram_html("```py\nx < 1") == (
        '<pre><code class="language-py">x &lt; 1</code></pre>'
    )


def test_code_spans_with_backticks() -> None:
    """Double-backtick spans; Slack cannot nest backticks so such a span stays text."""
    assert to_telegram_html("``a ` b``") == "<code>a ` b</code>"
    assert to_discord("``a ` b``") == "``a ` b``"
    assert to_slack_mrkdwn("``a ` b``") == "a ` b"


def test_a_fence_inside_code_cannot_close_the_block_early() -> None:
    """``` inside a ~~~ block gets a zero-width space for Slack and Discord."""
    source = "~~~\n```\n@everyone\n~~~"
    assert to_discord(source) == f"```\n`{Z}``\n@everyone\n```"
    assert to_slack_mrkdwn(source) == f"```\n`{Z}``\n@everyone\n```"
    assert to_telegram_html(source) == "<pre>```\n@everyone</pre>"


def test_code_blocks_leave_quotes() -> None:
    """No platform nests code in a quote well: the quote is split around the block."""
    source = "> before\n> ```\n> code\n> ```\n> after"
    assert to_telegram_html(source) == (
        "<blockquote>before</blockquote>\n<pre>code</pre>\n<blockquote>after</blockquote>"
    )
    assert to_slack_mrkdwn(source) == "> before\n```\ncode\n```\n> after"


@pytest.mark.parametrize(
    ("source", "slack", "telegram", "discord"),
    [
        (
            "[t](https://a.example/x|y>z)",
            "<https://a.example/x%7Cy%3Ez|t>",
            '<a href="https://a.example/x|y&gt;z">t</a>',
            "[t](https://a.example/x|y>z)",
        ),
        (
            '[t](https://a.example/?q=1&r="2")',
            '<https://a.example/?q=1&amp;r="2"|t>',
            '<a href="https://a.example/?q=1&amp;r=&quot;2&quot;">t</a>',
            '[t](https://a.example/?q=1&r="2")',
        ),
        (
            "[wiki](https://en.example/A_(b))",
            "<https://en.example/A_(b)|wiki>",
            '<a href="https://en.example/A_(b)">wiki</a>',
            "[wiki](https://en.example/A_%28b%29)",
        ),
        (
            '[t](<https://a.example/c> "a title")',
            "<https://a.example/c|t>",
            '<a href="https://a.example/c">t</a>',
            "[t](https://a.example/c)",
        ),
        (
            "[a <b> & *c*](https://a.example)",
            "<https://a.example|a &lt;b&gt; &amp; c>",
            '<a href="https://a.example">a &lt;b&gt; &amp; <i>c</i></a>',
            "[a <b> & *c*](https://a.example)",
        ),
        (
            "[x](javascript:alert(1))",
            "[x](javascript:alert(1))",
            "[x](javascript:alert(1))",
            "[x](javascript:alert(1))",
        ),
        ("[rel](/docs)", "[rel](/docs)", "[rel](/docs)", "[rel](/docs)"),
        (
            "![chart](https://a.example/c.png)",
            "<https://a.example/c.png|chart>",
            '<a href="https://a.example/c.png">chart</a>',
            "[chart](https://a.example/c.png)",
        ),
        (
            "[me](mailto:me@a.example)",
            "<mailto:me@a.example|me>",
            "me (me@a.example)",
            "[me](mailto:me@a.example)",
        ),
        (
            "(see https://a.example/p_(q)_r), then",
            "(see <https://a.example/p_(q)_r>), then",
            "(see https://a.example/p_(q)_r), then",
            "(see https://a.example/p_(q)_r), then",
        ),
        (
            "**https://a.example/b**",
            "*<https://a.example/b>*",
            "<b>https://a.example/b</b>",
            "**https://a.example/b**",
        ),
        (
            "https://a.example/?a=1&b=<2>",
            "<https://a.example/?a=1&amp;b=>&lt;2&gt;",
            "https://a.example/?a=1&amp;b=&lt;2&gt;",
            "https://a.example/?a=1&b=<2>",
        ),
    ],
)
def test_links_with_odd_urls(source: str, slack: str, telegram: str, discord: str) -> None:
    """Pipes, >, &, quotes, parentheses, titles, images, unsafe schemes, bare URLs."""
    assert to_slack_mrkdwn(source) == slack
    assert to_telegram_html(source) == telegram
    assert to_discord(source) == discord


def test_renderers_fall_back_to_escaped_text_on_an_internal_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A parser bug must not lose the reply: it is sent escaped, without formatting."""

    def broken(_: str) -> list[markdown.Block]:
        raise RuntimeError("bug")

    monkeypatch.setattr(markdown, "parse", broken)
    assert to_slack_mrkdwn("**a** <!channel>") == "**a** &lt;!channel&gt;"
    assert to_telegram_html("**a** <b>") == "**a** &lt;b&gt;"
    assert to_discord("`@everyone`") == f"`@{Z}everyone`"


def test_pathological_input_stays_fast_and_flat() -> None:
    """Deep nesting is capped and long runs of markers do not go quadratic."""
    deep = "*a " * 3000 + "b" + " a*" * 3000
    out = to_telegram_html(deep)
    assert out.count("<i>") == out.count("</i>") == 16
    for text in ("[a](" * 5000, "[" * 20000, "` `` ``` " * 3000, "_a_ " * 10000, ">" * 20000):
        to_telegram_html(text)
        to_slack_mrkdwn(text)
        to_discord(text)


class _WellFormed(HTMLParser):
    """Tracks a tag stack; records the first mis-nested or stray closing tag."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.error: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self.stack and self.stack[-1] == tag:
            self.stack.pop()
        elif self.error is None:
            self.error = f"</{tag}> with {self.stack} open"


_TELEGRAM_TAG = re.compile(
    r"<(?:b|i|s|code|pre|blockquote|/b|/i|/s|/code|/pre|/blockquote|/a"
    r'|a href="[^"<>]*"|code class="language-[A-Za-z0-9_+#.-]+")>'
)
_ENTITY = re.compile(r"&(?:amp|lt|gt|quot|#x27);")
ALPHABET = "***___~~~``[[]]((()<<>>&&@@\n\n\n  ab#-1.!\\|:/"
FRAGMENTS = ["https://x.example/", "```py\n", "\n```\n", "> ", "- ", "1. ", "# ", "<@&1>"]


def test_telegram_output_is_always_well_formed() -> None:
    """Random marker soup never raises and always yields Telegram-valid HTML."""
    rng = random.Random(20240601)
    for _ in range(3000):
        pieces = [
            rng.choice(FRAGMENTS) if rng.random() < 0.08 else rng.choice(ALPHABET)
            for _ in range(rng.randint(0, 120))
        ]
        source = "".join(pieces)
        out = markdown._render_telegram(source)  # the path without the safety net
        parser = _WellFormed()
        parser.feed(out)
        parser.close()
        assert parser.error is None, (source, out)
        assert parser.stack == [], (source, out)
        outside_tags = _TELEGRAM_TAG.sub("", out)
        assert "<" not in outside_tags, (source, out)
        assert ">" not in outside_tags, (source, out)
        assert "&" not in _ENTITY.sub("", outside_tags), (source, out)
        markdown._join(markdown.parse(source), markdown._slack_block)
        discord = markdown._join(markdown.parse(source), markdown._discord_block)
        assert "<@&" not in discord or "`" in source, (source, discord)

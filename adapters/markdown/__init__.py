"""One Markdown parse, rendered per platform: Slack mrkdwn, Telegram HTML and Discord.

The model answers in CommonMark-ish Markdown, but no chat platform renders exactly that:
Slack has its own *mrkdwn*, Telegram wants a small HTML subset (``parse_mode=HTML``) and
Discord renders most Markdown but pings a whole server for ``@everyone``. So a reply is
parsed once into a tiny AST (``adapters.markdown.blocks``, ``adapters.markdown.inline``)
and rendered here per platform, with each platform's escaping done in one place: text the
model wrote can never become a Slack ``<!channel>``, a Telegram tag or a Discord mass
mention. No input makes the renderers raise: as a last resort the text is sent escaped.

Stdlib only, no I/O.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable, Sequence

from adapters.markdown.blocks import (
    Block,
    CodeBlock,
    Heading,
    ListItem,
    Paragraph,
    Quote,
    parse,
)
from adapters.markdown.inline import (
    ZWSP,
    Code,
    Emph,
    Inline,
    Link,
    Strike,
    Strong,
    Text,
    plain,
)

__all__ = ["escape_slack", "to_discord", "to_slack_mrkdwn", "to_telegram_html"]

RULE = "───"

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
            label = " ".join(plain(node.children).split())
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
        return _join(parse(markdown), _slack_block)
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
            label, address = plain(node.children).strip(), node.url[7:]
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
    return _join(parse(markdown), _telegram_block)


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
        return _join(parse(markdown), _discord_block)
    except Exception:  # never fail a reply over formatting
        return _neutralise(markdown)

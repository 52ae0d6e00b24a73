"""What the model sees of a person's message that replies to or quotes another: the
quoted words first, marked as such, then the message."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_core.events import Quote

SHOWN = 500


def quote_json(quote: Quote | None) -> dict[str, str] | None:
    """The quote as stored with the message."""
    if quote is None:
        return None
    return {"text": quote.text[:4000], "author": quote.author}


def with_quote(text: str, quote: Mapping[str, Any] | None) -> str:
    """``text`` as the model reads it: after the message it replies to, when there is one."""
    if not quote or not isinstance(quote.get("text"), str) or not quote["text"].strip():
        return text
    words = " ".join(str(quote["text"]).split())
    shown = words if len(words) <= SHOWN else words[: SHOWN - 1] + "…"
    author = str(quote.get("author") or "someone")
    who = "your earlier message" if author == "assistant" else f"{author}'s message"
    return f'[Replying to {who}: "{shown}"]\n{text}'

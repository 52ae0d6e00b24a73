"""What the model sees of a person's message that replies to or quotes another: the
quoted words first, marked as such, then the message.

The mark is text, so a person could type one; a typed one is defused (``[Replying to``
becomes ``[typed: Replying to``), and the quoted words are a JSON string, so a quote
cannot close its mark early and say more."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agent_core.events import Quote

SHOWN = 500
_MARK = "[Replying to"
_TYPED = "[typed: Replying to"


def quote_json(quote: Quote | None) -> dict[str, str] | None:
    """The quote as stored with the message."""
    if quote is None:
        return None
    return {"text": quote.text[:4000], "author": quote.author, "message_id": quote.message_id or ""}


def with_quote(text: str, quote: Mapping[str, Any] | None) -> str:
    """``text`` as the model reads it: after the message it replies to, when there is one."""
    text = text.replace(_MARK, _TYPED)
    if not quote or not isinstance(quote.get("text"), str) or not quote["text"].strip():
        return text
    words = " ".join(str(quote["text"]).split()).replace(_MARK, _TYPED)
    shown = words if len(words) <= SHOWN else words[: SHOWN - 1] + "…"
    author = str(quote.get("author") or "someone")
    who = "your earlier message" if author == "assistant" else f"{author}'s message"
    return f"{_MARK} {who}: {json.dumps(shown, ensure_ascii=False)}]\n{text}"

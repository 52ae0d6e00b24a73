"""Packing a prompt into the model's window. Pure: no I/O, no clock, no model calls.

The system prompt and the current turn (the new message, and the tool calls and results
it led to) are pinned: never dropped, never cut. History fills what is left, newest first,
and is kept in chronological order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agent_core.model import ChatMessage

TokenCounter = Callable[[Sequence[ChatMessage]], int]


def rough_tokens(messages: Sequence[ChatMessage]) -> int:
    """A cheap upper estimate for Latin text: about 3 characters a token, 4 tokens framing."""
    return sum(len(m.content) // 3 + 4 for m in messages)


def pack(
    *,
    system: str,
    history: Sequence[ChatMessage],
    current: Sequence[ChatMessage],
    budget: int,
    count: TokenCounter = rough_tokens,
) -> list[ChatMessage]:
    """Return system + as much recent history as fits in ``budget`` tokens + the current turn."""
    pinned = [ChatMessage(role="system", content=system), *current]
    remaining = budget - count(pinned)
    kept: list[ChatMessage] = []
    for item in reversed(history):
        cost = count([item])
        if cost > remaining:
            break
        kept.append(item)
        remaining -= cost
    kept.reverse()
    return [pinned[0], *kept, *current]

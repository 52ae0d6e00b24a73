"""Prompt packing: pinned sections always kept, history newest-first into the budget."""

from __future__ import annotations

from agent_core.context import pack, rough_tokens
from agent_core.model import ChatMessage


def _history(n: int) -> list[ChatMessage]:
    return [
        ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"message {i} " * 10)
        for i in range(n)
    ]


def test_everything_fits_when_the_budget_allows() -> None:
    """Small history: system, all history in order, then the message."""
    history = _history(4)
    message = ChatMessage(role="user", content="now")
    packed = pack(system="sys", history=history, current=[message], budget=10_000)
    assert packed == [ChatMessage(role="system", content="sys"), *history, message]


def test_oldest_history_is_dropped_first() -> None:
    """Over budget: the most recent messages stay, in chronological order."""
    history = _history(50)
    message = ChatMessage(role="user", content="now")
    packed = pack(system="sys", history=history, current=[message], budget=300)
    kept = packed[1:-1]
    assert kept == history[-len(kept) :]
    assert 0 < len(kept) < 50
    assert rough_tokens(packed) <= 300


def test_pinned_sections_survive_a_tiny_budget() -> None:
    """The system prompt and the new message are never dropped or cut."""
    system = "x" * 5000
    message = ChatMessage(role="user", content="y" * 5000)
    packed = pack(system=system, history=_history(3), current=[message], budget=10)
    assert packed == [ChatMessage(role="system", content=system), message]

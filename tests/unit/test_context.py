"""Prompt assembly: pinned sections always kept, the summary on top, history
newest-first into the budget."""

from __future__ import annotations

from agent_core.context import SUMMARY_HEADING, assemble, rough_tokens
from agent_core.model import ChatMessage


def _history(n: int) -> list[ChatMessage]:
    return [
        ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"message {i} " * 10)
        for i in range(n)
    ]


def pack(**kwargs: object) -> list[ChatMessage]:
    return assemble(summary=None, **kwargs).messages  # type: ignore[arg-type]


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


def test_the_summary_sits_under_the_system_prompt_and_left_out_counts_what_did_not_fit() -> None:
    history = _history(50)
    message = ChatMessage(role="user", content="now")
    packed = assemble(
        system="sys", summary="Alice prefers vim.", history=history, current=[message], budget=300
    )
    assert packed.messages[0].content == f"sys\n\n{SUMMARY_HEADING}\nAlice prefers vim."
    kept = packed.messages[1:-1]
    assert packed.left_out == 50 - len(kept) > 0
    assert packed.tokens["history"] == rough_tokens(kept)
    assert packed.tokens["summary"] > 0

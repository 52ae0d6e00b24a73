"""Packing a prompt into the model's window. Pure: no I/O, no clock, no model calls.

The system prompt and the current turn (the new message, and the tool calls and results
it led to) are pinned: never dropped, never cut. The running summary of older history
sits with the system prompt at the top. History fills what is left, newest first, and is
kept in chronological order; what does not fit is what the summary must take in next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent_core.model import IMAGE_TOKENS, ChatMessage

TokenCounter = Callable[[Sequence[ChatMessage]], int]


def rough_tokens(messages: Sequence[ChatMessage]) -> int:
    """A cheap upper estimate for Latin text: about 3 characters a token, 4 tokens framing."""
    return sum(len(m.content) // 3 + 4 + IMAGE_TOKENS * len(m.images) for m in messages)


SUMMARY_HEADING = "Summary of the earlier conversation (older messages are not shown):"


@dataclass(frozen=True, slots=True)
class Assembly:
    """A packed prompt, its tokens per section, and how much history did not fit."""

    messages: list[ChatMessage]
    tokens: dict[str, int]
    left_out: int  # the oldest history messages that did not fit


def assemble(
    *,
    system: str,
    summary: str | None,
    history: Sequence[ChatMessage],
    current: Sequence[ChatMessage],
    budget: int,
    count: TokenCounter = rough_tokens,
) -> Assembly:
    """The prompt: the system prompt verbatim and the running summary at the top, the
    current turn at the bottom (the places models attend to most), and as much recent
    history as fits between them, in order."""
    top = system if not summary else f"{system}\n\n{SUMMARY_HEADING}\n{summary}"
    pinned = [ChatMessage(role="system", content=top), *current]
    tokens = {
        "system": count([ChatMessage(role="system", content=system)]),
        "summary": count([ChatMessage(role="system", content=summary)]) if summary else 0,
        "current": count(current),
    }
    remaining = budget - count(pinned)
    kept: list[ChatMessage] = []
    for item in reversed(history):
        cost = count([item])
        if cost > remaining:
            break
        kept.append(item)
        remaining -= cost
    kept.reverse()
    tokens["history"] = count(kept) if kept else 0
    return Assembly([pinned[0], *kept, *current], tokens, len(history) - len(kept))


def summary_prompt(previous: str | None, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """The request that folds older messages into the running summary."""
    transcript = "\n".join(f"{m.role}: {m.content}" for m in messages)
    return [
        ChatMessage(
            role="system",
            content=(
                "You keep the running summary of a conversation between people and an "
                "assistant. Rewrite the summary to include the new messages. Keep every "
                "fact, name, number, decision, preference and open task; drop small talk. "
                "Answer with the summary only."
            ),
        ),
        ChatMessage(
            role="user",
            content=f"Summary so far:\n{previous or '(none)'}\n\nNew messages:\n{transcript}",
        ),
    ]

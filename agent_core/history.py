"""What a model call sees of the past: the conversation's running summary and the recent
history after it, packed into the window by :func:`agent_core.context.assemble`.

When the history no longer fits, its oldest whole turns are folded into the running
summary by a (possibly cheaper) summary model, so the summary plus the recent history fit
again with room to spare, and the new summary is stored for the next turns. The system
prompt and the current turn are never cut; the summary keeps the older facts in view.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from agent_core.context import Assembly, assemble, rough_tokens, summary_prompt
from agent_core.errors import ModelError
from agent_core.model import ChatMessage, Model
from agent_core.records import HistoryLine, TurnRecord
from agent_core.stores import Journal

log = structlog.get_logger("chatgate.history")

# The running summary may take this share of the window; after a fold, the verbatim
# history keeps at most half of what is left, so folds are rare.
SUMMARY_SHARE = 0.25


@dataclass(frozen=True, slots=True)
class Past:
    """The running summary and the history after it, each message with its turn id."""

    summary: str | None
    messages: tuple[ChatMessage, ...]
    turns: tuple[int, ...]

    @classmethod
    def of(cls, summary: str | None, records: Sequence[HistoryLine]) -> Past:
        """From what the store returned."""
        return cls(
            summary,
            tuple(
                ChatMessage(role="assistant" if r.role == "assistant" else "user", content=r.text)
                for r in records
            ),
            tuple(r.turn_id or 0 for r in records),
        )


class Prompter:
    """Builds each model call's prompt within the model's window."""

    def __init__(
        self,
        store: Journal,
        *,
        model: Model,
        summarizer: Model | None,
        system_prompt: str,
        reply_max_tokens: int,
    ) -> None:
        self._store = store
        self._model = model
        self._summarizer = summarizer
        self._system = system_prompt
        self._reply_max_tokens = reply_max_tokens

    def _budget(self) -> int:
        return self._model.context_window() - self._reply_max_tokens

    def _assemble(self, past: Past, current: Sequence[ChatMessage]) -> Assembly:
        budget = self._budget()
        packed = assemble(
            system=self._system,
            summary=past.summary,
            history=past.messages,
            current=current,
            budget=budget,
        )
        if rough_tokens(packed.messages) > budget // 2:
            # Close to the window: count exactly with the model's tokenizer.
            packed = assemble(
                system=self._system,
                summary=past.summary,
                history=past.messages,
                current=current,
                budget=budget,
                count=self._model.count_tokens,
            )
        return packed

    async def prompt(
        self, turn: TurnRecord, past: Past, current: Sequence[ChatMessage]
    ) -> tuple[Assembly, Past]:
        """The prompt, and the past it was built from (changed when a fold happened)."""
        packed = self._assemble(past, current)
        if packed.left_out and self._summarizer is not None:
            past = await self._fold(turn, past, current)
            packed = self._assemble(past, current)
        log.debug("prompt assembled", tokens=packed.tokens, left_out=packed.left_out)
        return packed, past

    async def _fold(self, turn: TurnRecord, past: Past, current: Sequence[ChatMessage]) -> Past:
        """Fold the oldest whole turns into the summary until the rest of the history fits
        in half the room the summary and the pinned messages leave."""
        assert self._summarizer is not None
        budget = self._budget()
        cap = int(budget * SUMMARY_SHARE)
        pinned = rough_tokens([ChatMessage(role="system", content=self._system), *current])
        room = max(0, (budget - pinned - cap) // 2)
        keep = 0
        used = 0
        for message in reversed(past.messages):
            cost = rough_tokens([message])
            if used + cost > room:
                break
            used += cost
            keep += 1
        cut = len(past.messages) - keep
        if cut == 0:
            return past
        upto = past.turns[cut - 1]
        while cut < len(past.messages) and past.turns[cut] == upto:
            cut += 1  # whole turns only: the stored cut is a turn id
        try:
            reply = await self._summarizer.complete(
                summary_prompt(past.summary, past.messages[:cut]), max_tokens=cap
            )
        except ModelError as exc:
            log.warning("summarising older history failed; it is left out", error=str(exc))
            return past
        summary = reply.text.strip()[: cap * 3] or (past.summary or "")
        await self._store.save_summary(turn.conversation_id, summary=summary, upto_turn=upto)
        log.info("history folded into the summary", turns_upto=upto, messages=cut)
        return Past(summary, past.messages[cut:], past.turns[cut:])

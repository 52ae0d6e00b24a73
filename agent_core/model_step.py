"""A turn's model call, as the turn runner journals it: the step started (the first call
of a turn reads the conversation's past in the same transaction), the budgets judged, the
prompt packed, the call raced against a stop, and its output (not yet journaled)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import JsonValue

from agent_core import tracing
from agent_core.budgets import Verdict, judge
from agent_core.errors import ModelError
from agent_core.history import Past
from agent_core.journaled import ModelCallOutput
from agent_core.model import ChatMessage, TextSoFar
from agent_core.records import TurnRecord
from agent_core.turn_setup import Setup
from agent_core.turn_stop import StopSignal

if TYPE_CHECKING:
    from agent_core.loop import TurnObserver, TurnStore

log = structlog.get_logger("chatgate.turn")

NO_MODEL_REPLY = (
    "No model is configured, so I cannot answer yet. Set CHATGATE_MODEL to a litellm model "
    "name (for example openai/gpt-4o-mini), and CHATGATE_MODEL_API_BASE / "
    "CHATGATE_MODEL_API_KEY for an OpenAI-compatible server, then restart chatgate."
)


class ModelStep:
    """Makes one model call of a turn."""

    def __init__(
        self,
        store: TurnStore,
        *,
        history_limit: int,
        reply_max_tokens: int,
        observer: TurnObserver | None,
    ) -> None:
        self._store = store
        self._history_limit = history_limit
        self._reply_max_tokens = reply_max_tokens
        self._observer = observer

    async def _start(self, turn: TurnRecord, seq: int, past: Past | None, input: JsonValue) -> Past:
        """Journal the call as started; the first call of a turn reads the past too."""
        if past is not None:
            await self._store.begin_step(turn.id, seq, kind="model_call", input=input)
            return past
        summary, records = await self._store.start_model_call(
            turn, seq, input=input, history_limit=self._history_limit
        )
        return Past.of(summary, records)

    async def call(
        self,
        turn: TurnRecord,
        setup: Setup,
        seq: int,
        past: Past | None,
        current: list[ChatMessage],
        specs: Sequence[Mapping[str, Any]],
        *,
        retry_errors: bool,
        on_text: TextSoFar | None,
        stop: StopSignal,
    ) -> tuple[ModelCallOutput, Past]:
        """Make the model call (journaled as started); return its output, not yet journaled,
        and the past it saw."""
        model = setup.model
        if model is None:
            past = await self._start(turn, seq, past, {})
            output = ModelCallOutput(
                role="system", text=NO_MODEL_REPLY, error="no model configured"
            )
            return output, past
        # Packing asks the model for its window and tokenizer: litellm must be loaded (off
        # the event loop) first.
        await model.warm_up()
        asked_input: dict[str, JsonValue] = {"model": model.name}
        if setup.profile is not None:
            asked_input["profile"] = setup.profile  # which profile answered, in the journal
        past = await self._start(turn, seq, past, asked_input)
        verdict = Verdict()
        if setup.budgets.any:
            spent = await self._store.spending(turn.conversation_id, turn.user, turn_id=turn.id)
            verdict = judge(setup.budgets, spent)
            if verdict.stop is not None:
                log.info("budget reached", reason=verdict.stop)
                output = ModelCallOutput(role="system", text=verdict.stop, error="budget reached")
                return output, past
        assert setup.prompter is not None
        packed, past = await setup.prompter.prompt(turn, past, current)
        prompt = packed.messages
        asked = tracing.model_call_attributes(seq, model.name)
        try:
            with tracing.span("chatgate.model_call", asked) as span:
                reply = await stop.race(
                    model.complete(
                        prompt, max_tokens=self._reply_max_tokens, tools=specs, on_text=on_text
                    ),
                    seq + 1,
                )
                span.set(tracing.model_reply_attributes(reply))
        except ModelError as exc:
            if retry_errors:
                raise
            output = ModelCallOutput(
                role="system",
                text=f"Sorry, the model could not be reached ({exc}). "
                "Your message is saved; send it again to retry.",
                error=str(exc),
            )
        else:
            empty = not reply.text and not reply.tool_calls
            text = "(the model returned an empty reply)" if empty else reply.text
            if verdict.warning is not None and not reply.tool_calls:
                text = f"{text}\n\n_{verdict.warning}_"
            output = ModelCallOutput(
                text=text,
                tool_calls=reply.tool_calls,
                model=reply.model,
                messages=len(prompt),
                context_tokens=dict(packed.tokens),
                prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens,
                cost_usd=reply.cost_usd,
            )
            if self._observer:
                self._observer.model_called(turn, output)
        return output, past

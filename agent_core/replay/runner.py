"""The model loop of a replay: the scenario's prompt assembled as the turn's was, the model
called, and each tool call it makes answered from the recorded calls.

It is given a model and nothing else: no store, no platform, no tool. A tool call that
matches a recorded one (same tool, equivalent arguments, each recorded call served once)
gets that call's recorded result; any other gets a "not available in replay" result and
counts as a divergence. Nothing real happens, whatever the model asks for.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import JsonValue

from agent_core.context import assemble, rough_tokens
from agent_core.errors import ModelError
from agent_core.journaled import Spend
from agent_core.model import ChatMessage, Model
from agent_core.replay.recorded import RecordedCall, Scenario, canonical, parse_arguments

UNAVAILABLE = (
    "not available in replay: the recorded turn made no {name} call with these arguments, "
    "so nothing was run and there is no result. Go on without it."
)

Served = Literal["recorded", "unavailable"]

# Asked before each model call: the reason to stop (a budget reached), or None.
SpendCheck = Callable[[int], Awaitable[str | None]]
# Told what each model call cost.
SpendNote = Callable[[Spend], Awaitable[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayedCall:
    """A tool call the replayed model made, and what it was answered."""

    name: str
    arguments: JsonValue
    served: Served
    result: str
    # The recorded call it matched (its place among the recorded calls).
    matched: int | None = None


@dataclass(slots=True, kw_only=True)
class Rerun:
    """How the turn went this time."""

    model: str
    text: str = ""
    role: str = "assistant"
    calls: list[ReplayedCall] = field(default_factory=list)
    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    # Why it ended without an answer (a model error, a budget, the step limit).
    error: str | None = None


def tool_specs(
    offered: Sequence[Mapping[str, Any]], recorded: Sequence[RecordedCall]
) -> list[dict[str, Any]]:
    """What the model is offered: ``offered`` (this deployment's tools), and every tool the
    recorded turn called that is not among them (an MCP server's, ``run_command``), with a
    schema that takes any arguments: its real schema lives with a server replay never
    starts."""
    specs = [dict(spec) for spec in offered]
    names = {str(spec.get("function", {}).get("name")) for spec in specs}
    for call in recorded:
        if call.name in names:
            continue
        names.add(call.name)
        specs.append(
            {
                "type": "function",
                "function": {
                    "name": call.name,
                    "description": f"{call.name} (recorded in the journal; replayed only)",
                    "parameters": {"type": "object", "additionalProperties": True},
                },
            }
        )
    return specs


class Recorded:
    """The recorded calls, each served at most once, in the order they were made."""

    def __init__(self, calls: Sequence[RecordedCall]) -> None:
        self._calls = list(calls)
        self._keys = [(c.name, canonical(c.arguments)) for c in calls]
        self.used: set[int] = set()

    def take(self, name: str, arguments: JsonValue) -> int | None:
        """The first unused recorded call that matches, marked used; None when none does."""
        key = (name, canonical(arguments))
        for index, recorded in enumerate(self._keys):
            if index not in self.used and recorded == key:
                self.used.add(index)
                return index
        return None

    def result(self, index: int) -> str:
        """What the recorded call's model read."""
        return self._calls[index].result


class Replayer:
    """Runs scenarios against one model and system prompt."""

    def __init__(
        self,
        model: Model,
        *,
        system_prompt: str,
        specs: Sequence[Mapping[str, Any]] = (),
        max_tokens: int = 1024,
        max_steps: int = 16,
        may_spend: SpendCheck | None = None,
        spent: SpendNote | None = None,
    ) -> None:
        self._model = model
        self._system = system_prompt
        self._specs = list(specs)
        self._max_tokens = max_tokens
        self._max_steps = max_steps
        self._may_spend = may_spend
        self._spent = spent

    async def run(self, scenario: Scenario, recorded: Sequence[RecordedCall]) -> Rerun:
        """One run of the scenario, to its final answer (or its end)."""
        await self._model.warm_up()
        served = Recorded(recorded)
        specs = tool_specs(self._specs, recorded)
        rerun = Rerun(model=self._model.name)
        current = scenario.current()
        for _step in range(self._max_steps):
            if self._may_spend is not None:
                stop = await self._may_spend(rerun.prompt_tokens + rerun.completion_tokens)
                if stop is not None:
                    rerun.role, rerun.text, rerun.error = "system", stop, "budget reached"
                    return rerun
            packed = assemble(
                system=self._system,
                summary=scenario.summary,
                history=scenario.history,
                current=current,
                budget=self._model.context_window() - self._max_tokens,
                count=rough_tokens,
            )
            started = time.monotonic()
            try:
                reply = await self._model.complete(
                    packed.messages, max_tokens=self._max_tokens, tools=specs
                )
            except ModelError as exc:
                rerun.seconds += time.monotonic() - started
                rerun.role, rerun.text, rerun.error = "system", f"model error: {exc}", str(exc)
                return rerun
            rerun.seconds += time.monotonic() - started
            rerun.model_calls += 1
            rerun.prompt_tokens += reply.prompt_tokens
            rerun.completion_tokens += reply.completion_tokens
            rerun.cost_usd += reply.cost_usd
            if self._spent is not None:
                await self._spent(
                    Spend(
                        model=reply.model,
                        prompt_tokens=reply.prompt_tokens,
                        completion_tokens=reply.completion_tokens,
                        cost_usd=reply.cost_usd,
                    )
                )
            if not reply.tool_calls:
                rerun.text = reply.text
                return rerun
            current.append(
                ChatMessage(role="assistant", content=reply.text, tool_calls=reply.tool_calls)
            )
            for call in reply.tool_calls:
                arguments = parse_arguments(call.arguments)
                index = served.take(call.name, arguments)
                if index is None:
                    answer = ReplayedCall(
                        name=call.name,
                        arguments=arguments,
                        served="unavailable",
                        result=UNAVAILABLE.format(name=call.name),
                    )
                else:
                    answer = ReplayedCall(
                        name=call.name,
                        arguments=arguments,
                        served="recorded",
                        result=served.result(index),
                        matched=index,
                    )
                rerun.calls.append(answer)
                current.append(
                    ChatMessage(role="tool", content=answer.result, tool_call_id=call.id)
                )
        rerun.role, rerun.error = "system", "step limit reached"
        rerun.text = f"(stopped after {self._max_steps} model calls without an answer)"
        return rerun

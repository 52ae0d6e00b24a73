"""A tool: an async function whose type hints give the JSON schema the model sees.

The function's first parameter receives the :class:`ToolContext`; the others are the
tool's arguments, validated with pydantic before the function runs. A validation error is
not raised to the turn: it becomes a result the model reads and can correct.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import structlog
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from agent_core.events import ConversationKey
from agent_core.records import ApprovalRecord

log = structlog.get_logger("chatgate.tools")

OutcomeStatus: TypeAlias = Literal["ok", "error", "invalid_arguments", "timeout", "denied"]
DEFAULT_OUTPUT_LIMIT = 8_000


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnContext:
    """Who and where a turn runs for: what tool factories build from."""

    turn_id: int
    conversation_id: str
    conversation: ConversationKey
    user: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolContext:
    """What one tool call gets besides its arguments."""

    turn: TurnContext
    call_id: str
    # Stable across re-runs of the same call (``turn_id:seq``): pass it to anything that
    # can dedupe, so a re-run after a crash does not repeat the effect.
    idempotency_key: str
    # An earlier attempt journaled this call's intent and not its result: it may have
    # had its effect (a tool that can look should, before doing it again).
    rerun: bool = False
    # A tool that asks a person (``ask_user``): the question, answered or over.
    question: ApprovalRecord | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutcome:
    """What a call produced, as the model will read it."""

    status: OutcomeStatus
    output: str

    def for_model(self) -> str:
        """The text of the tool message: plain output when ok, else a small JSON object."""
        if self.status == "ok":
            return self.output
        return json.dumps({"status": self.status, "error": self.output})


ToolFunction: TypeAlias = Callable[..., Awaitable[str]]


def compress(text: str, limit: int = DEFAULT_OUTPUT_LIMIT) -> str:
    """Keep the head and the tail of long output and say how much was cut."""
    if len(text) <= limit:
        return text
    head = text[: limit * 2 // 3]
    tail = text[-(limit // 3) :]
    omitted = len(text) - len(head) - len(tail)
    return f"{head}\n[... {omitted} characters omitted of {len(text)} ...]\n{tail}"


class Tool:
    """A named, described, schema-checked async function the model may call.

    Building one creates a pydantic model from the signature: do it once, not per turn.
    """

    # It asks a person and the turn waits for the answer (``ask_user``): it runs once the
    # question is over, with the question in its context.
    asks_person: bool = False

    def __init__(
        self,
        fn: ToolFunction,
        *,
        name: str | None = None,
        description: str | None = None,
        idempotent: bool | Callable[[Mapping[str, Any]], bool],
        timeout: float = 60.0,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        asks_person: bool = False,
    ) -> None:
        self._fn = fn
        self.asks_person = asks_person
        self.name = name or fn.__name__
        self.description = description or inspect.cleandoc(fn.__doc__ or "").split("\n\n")[0]
        self._idempotent = idempotent
        self.timeout = timeout
        self.output_limit = output_limit
        self._arguments = _arguments_model(fn, self.name)
        self._spec = self._build_spec()

    def is_idempotent(self, arguments: Mapping[str, Any]) -> bool:
        """May a call with these arguments run again after a crash without harm?"""
        if callable(self._idempotent):
            return self._idempotent(arguments)
        return self._idempotent

    def spec(self) -> dict[str, Any]:
        """The OpenAI-style function description sent to the model (built once)."""
        return self._spec

    def _build_spec(self) -> dict[str, Any]:
        schema = self._arguments.model_json_schema()
        schema.pop("title", None)
        for field in schema.get("properties", {}).values():
            field.pop("title", None)
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": schema},
        }

    def validate(self, arguments: str | Mapping[str, Any]) -> dict[str, Any]:
        """Parse and check arguments; raise :class:`InvalidArguments` saying what is wrong."""
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except ValueError as exc:
                raise InvalidArguments(f"arguments are not valid JSON: {exc}") from None
        if not isinstance(arguments, Mapping):
            raise InvalidArguments("arguments must be a JSON object")
        try:
            parsed = self._arguments.model_validate(dict(arguments))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            raise InvalidArguments(problems) from None
        return parsed.model_dump()

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutcome:
        """Run with validated arguments under the tool's timeout; output is compressed."""
        try:
            async with asyncio.timeout(self.timeout):
                output = await self._fn(context, **arguments)
        except TimeoutError:
            return ToolOutcome(status="timeout", output=f"{self.name} took over {self.timeout}s")
        except ToolFailed as exc:
            return ToolOutcome(status="error", output=compress(str(exc), self.output_limit))
        except Exception as exc:
            # A bug in a tool is the model's problem to route around, not the turn's end.
            log.exception("tool crashed", tool=self.name)
            message = f"{self.name} failed unexpectedly: {type(exc).__name__}: {exc}"
            return ToolOutcome(status="error", output=compress(message, self.output_limit))
        return ToolOutcome(status="ok", output=compress(output, self.output_limit))


class InvalidArguments(ValueError):
    """The model's arguments do not fit the tool's schema (told to the model, not raised)."""


class ToolFailed(Exception):
    """A tool could not do what was asked; the message is shown to the model."""


def _arguments_model(fn: ToolFunction, name: str) -> type[BaseModel]:
    hints = typing.get_type_hints(fn, include_extras=True)
    parameters = list(inspect.signature(fn).parameters.values())[1:]  # the first is the context
    fields: dict[str, Any] = {}
    for parameter in parameters:
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[parameter.name] = (hints[parameter.name], default)
    return create_model(name, __config__=ConfigDict(extra="forbid"), **fields)

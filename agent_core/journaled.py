"""The shapes of the two durable seams that are stored as JSON: a model call's journaled
output, and a ``jobs`` listing's payload. Each is a dataclass with one ``TypeAdapter``,
as ``events.py`` does for events, so whoever writes one and whoever reads it back (after a
restart, on another process, or rows written by an older release) agree on one type.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import JsonValue, TypeAdapter, ValidationError

from agent_core.model import ToolCallRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class Spend:
    """What one model call cost: its tokens and dollars, by the model that answered."""

    model: str | None = None
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0
    # What the provider charges for the call, by litellm's price list (0 when unknown).
    cost_usd: float | None = 0.0

    @property
    def tokens(self) -> int:
        """Prompt and completion tokens together."""
        return (self.prompt_tokens or 0) + (self.completion_tokens or 0)

    @property
    def any(self) -> bool:
        """Whether there is anything to count."""
        return bool(self.tokens or self.cost_usd)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCallOutput:
    """A finished model call as its journal step holds it: the answer (words, tool calls,
    or a system message when no model answered), and what it cost and saw."""

    role: Literal["assistant", "system"] = "assistant"
    text: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    # Why no model answered (no model configured, a budget, an unreachable model).
    error: str | None = None
    model: str | None = None
    # How many messages the prompt held, and its tokens per context section.
    messages: int | None = None
    context_tokens: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None

    @property
    def spend(self) -> Spend:
        """What the call cost."""
        return Spend(
            model=self.model,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cost_usd=self.cost_usd,
        )

    def to_json(self) -> dict[str, JsonValue]:
        """The journal's JSON (fields without a value left out)."""
        dumped: dict[str, JsonValue] = _model_call().dump_python(
            self, mode="json", exclude_none=True
        )
        return dumped

    @staticmethod
    def from_json(value: JsonValue) -> ModelCallOutput:
        """Read a journaled output back; one that is not an object (never written by any
        release) reads as a failed call."""
        try:
            parsed: ModelCallOutput = _model_call().validate_python(value)
        except ValidationError as exc:
            return ModelCallOutput(role="system", error=f"unreadable journal entry: {exc}")
        return parsed


@dataclass(frozen=True, slots=True, kw_only=True)
class RunItem:
    """One run of a schedule in a listing."""

    job_id: int | None = None
    status: str
    scheduled_for: str | None = None
    finished_at: str | None = None
    receipt: str | None = None
    error: str | None = None
    # Seconds from when it was planned to start to when it started (None: not started).
    lag_seconds: float | None = None
    late: bool = False
    # A quiet run (``notify = "if_notable"``) that found nothing worth posting.
    nothing_to_report: bool = False

    def lag_note(self) -> str:
        """How late it started, in words ("" until it started)."""
        return lag_note(self.lag_seconds, late=self.late)


def lag_note(lag: float | None, *, late: bool) -> str:
    """``started +0.4 s``, or ``late: started 3 min 5 s after its time`` ("" for None)."""
    if lag is None:
        return ""
    if lag < 60:
        span = f"{lag:.1f} s" if lag < 10 else f"{lag:.0f} s"
    elif lag < 3600:
        span = f"{int(lag // 60)} min {int(lag % 60)} s"
    else:
        span = f"{int(lag // 3600)} h {int(lag % 3600 // 60)} min"
    return f"late: started {span} after its time" if late else f"started +{span}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleItem:
    """A schedule in a listing (and in the web API): what, when, its state and latest runs."""

    id: str
    status: str
    when: str = ""
    prompt: str = ""
    created_by: str = ""
    next_run_at: str | None = None
    runs: tuple[RunItem, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsListing:
    """A ``jobs`` answer's payload: the conversation's schedules, which every platform
    draws with buttons to pause, resume or delete each."""

    jobs: tuple[ScheduleItem, ...] = ()

    def to_payload(self) -> dict[str, JsonValue]:
        """The message payload (``{"jobs": [...]}``)."""
        dumped: dict[str, JsonValue] = _listing().dump_python(self, mode="json")
        return dumped

    @staticmethod
    def from_payload(payload: Mapping[str, Any] | None) -> JobsListing | None:
        """The listing a message payload holds; None when it holds none (or one that
        does not read as a listing)."""
        if payload is None or "jobs" not in payload:
            return None
        try:
            listing: JobsListing = _listing().validate_python(dict(payload))
        except ValidationError:
            return None
        return listing


@dataclass(frozen=True, slots=True, kw_only=True)
class Choice:
    """One button of a question chatgate asks (``forget me``'s confirmation): its label,
    the action a press is, and the value the press carries."""

    label: str
    action: str
    value: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Choices:
    """A message payload with buttons that answer it, which every platform draws natively
    (Slack blocks, a Telegram inline keyboard, Discord components, web chat buttons)."""

    choices: tuple[Choice, ...] = ()

    def to_payload(self) -> dict[str, JsonValue]:
        """The message payload (``{"choices": [...]}``)."""
        dumped: dict[str, JsonValue] = _choices().dump_python(self, mode="json")
        return dumped

    @staticmethod
    def from_payload(payload: Mapping[str, Any] | None) -> Choices | None:
        """The buttons a message payload holds; None when it holds none."""
        if payload is None or "choices" not in payload:
            return None
        try:
            found: Choices = _choices().validate_python(dict(payload))
        except ValidationError:
            return None
        return found


def item_json(item: ScheduleItem) -> dict[str, JsonValue]:
    """One schedule as JSON (the web API's answer to a schedule action)."""
    dumped: dict[str, JsonValue] = _item().dump_python(item, mode="json")
    return dumped


@functools.cache
def _model_call() -> TypeAdapter[ModelCallOutput]:
    return TypeAdapter(ModelCallOutput)


@functools.cache
def _listing() -> TypeAdapter[JobsListing]:
    return TypeAdapter(JobsListing)


@functools.cache
def _item() -> TypeAdapter[ScheduleItem]:
    return TypeAdapter(ScheduleItem)


@functools.cache
def _choices() -> TypeAdapter[Choices]:
    return TypeAdapter(Choices)

"""The model port: one chat-completion call, whatever provider is behind it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias

ChatRole: TypeAlias = Literal["system", "user", "assistant"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatMessage:
    """One message of the prompt sent to the model."""

    role: ChatRole
    content: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelReply:
    """What the model answered, and what it cost in tokens."""

    text: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Model(Protocol):
    """A chat model. Implementations map their library's errors to ``ModelError``."""

    @property
    def name(self) -> str:
        """The configured model name (for logs and metrics)."""
        ...

    async def warm_up(self) -> None:
        """Get ready for the first call (import libraries, build clients); run at start."""
        ...

    def context_window(self) -> int:
        """How many tokens of prompt plus reply the model accepts."""
        ...

    def count_tokens(self, messages: Sequence[ChatMessage]) -> int:
        """How many prompt tokens these messages take for this model."""
        ...

    async def complete(self, messages: Sequence[ChatMessage], *, max_tokens: int) -> ModelReply:
        """Send the messages and return the reply; raise ``ModelError`` when every try failed."""
        ...

"""The model port: one chat-completion call, whatever provider is behind it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias

ChatRole: TypeAlias = Literal["system", "user", "assistant", "tool"]

TextSoFar: TypeAlias = Callable[[str], None]
"""Told the reply's text so far each time it grows, while the model writes it. Called on
the event loop for every piece the model sends: it must be quick (note the text, wake a
task)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallRequest:
    """The model asks to call a tool; ``arguments`` is the JSON text it wrote."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image that goes with a message's text, for a model that sees images."""

    content_type: str
    data: bytes


# What an image takes of the window, roughly (a high-detail tile set is 765 tokens).
IMAGE_TOKENS = 800


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatMessage:
    """One message of the prompt sent to the model.

    An assistant message may carry ``tool_calls``; a ``tool`` message answers one of them
    (``tool_call_id``). A person's message may carry images (``images``) after its text.
    """

    role: ChatRole
    content: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str | None = None
    images: tuple[ImagePart, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelReply:
    """What the model answered (text, tool calls or both) and what it cost in tokens."""

    text: str
    model: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # What the provider charges for the call, by litellm's price list (0 when unknown).
    cost_usd: float = 0.0


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """A server's whole answer to one request; header names are in lower case."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class HttpUnreachable(Exception):
    """No answer came: the connection failed, or none came within the timeout."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class HttpPoster(Protocol):
    """The HTTP client a model's calls share: one POST, the whole answer read.

    The core names no HTTP library for it; the processes' bootstrap hands one in (the
    gateway's and the workers' is aiohttp, ``workers.http_poster``). Whoever is given one
    closes it."""

    async def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        lines: Callable[[bytes], None] | None = None,
    ) -> HttpAnswer:
        """Send ``body``; raise ``HttpUnreachable`` when no answer came (within the client's
        timeout, the model's).

        With ``lines``, a successful (2xx) answer is read line by line as it arrives, each
        line (without its end) handed to ``lines``, and the answer's ``body`` is empty: a
        streamed answer (server-sent events). An answer that breaks off midway is
        ``HttpUnreachable`` too."""
        ...

    async def aclose(self) -> None:
        """Close its connections."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Transcript:
    """What a transcription model heard, and what hearing it cost."""

    text: str
    model: str
    cost_usd: float = 0.0
    seconds: float | None = None


class Transcriber(Protocol):
    """A speech-to-text model (``CHATGATE_TRANSCRIBE_MODEL``)."""

    async def transcribe(self, name: str, data: bytes) -> Transcript:
        """The words of the audio file ``name``; raise ``ModelError`` when that fails."""
        ...


class Model(Protocol):
    """A chat model. Implementations map their library's errors to ``ModelError``."""

    @property
    def name(self) -> str:
        """The configured model name (for logs and metrics)."""
        ...

    async def warm_up(self) -> None:
        """Get ready for the first call (import libraries, build clients); run at start."""
        ...

    async def aclose(self) -> None:
        """Let go of what the calls share (an HTTP session); run once, at shutdown."""
        ...

    def context_window(self) -> int:
        """How many tokens of prompt plus reply the model accepts."""
        ...

    def count_tokens(self, messages: Sequence[ChatMessage]) -> int:
        """How many prompt tokens these messages take for this model."""
        ...

    def sees_images(self) -> bool:
        """Whether the model reads images (``ChatMessage.images``)."""
        ...

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int,
        tools: Sequence[Mapping[str, Any]] = (),
        on_text: TextSoFar | None = None,
    ) -> ModelReply:
        """Send the messages (and the tools' specs) and return the reply.

        With ``on_text`` the model streams its answer and tells ``on_text`` the text so far
        as it grows (a try that fails and is retried starts it over); the reply returned
        is the same as without. Raise ``ModelError`` when every try, fallbacks included,
        failed.
        """
        ...

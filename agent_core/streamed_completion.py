"""A chat completion read as the OpenAI wire streams it (server-sent events of
``chat.completion.chunk`` objects), put back together into the ``chat.completion`` the same
call would have answered unstreamed, so the provider's own response transformation reads it
as it reads any answer.

Only the first choice is kept (chatgate asks for one). Tool calls arrive in pieces keyed by
their ``index``: the first piece names the call, the rest add to its arguments.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

# ``raw_decode`` of text skips what ``json.loads`` of bytes does first on every chunk (guess
# the encoding, match the leading whitespace): a third of a chunk's reading time.
_decode = json.JSONDecoder().raw_decode


class StreamBroken(Exception):
    """The stream said something that is not a chunk (or an error in place of one)."""


class StreamedCompletion:
    """Feed it the answer's lines, in order; ``on_text`` hears the text so far each time a
    chunk adds to it. :meth:`completion` is the whole answer once the stream ended."""

    def __init__(self, on_text: Callable[[str], None]) -> None:
        self._on_text = on_text
        self._text = ""
        self._calls: dict[int, dict[str, Any]] = {}
        self._head: dict[str, Any] = {}
        self._role = "assistant"
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None
        self.done = False

    @property
    def text(self) -> str:
        """What the model has written so far."""
        return self._text

    def feed(self, line: bytes) -> None:
        """One line of the event stream (comments, blank lines and ``[DONE]`` included)."""
        if line[:5] != b"data:":
            return  # an event's end, a comment (": keep-alive"), an ``event:`` or ``id:``
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done = True
            return
        try:
            text = data.decode()
            chunk, end = _decode(text)
        except ValueError as exc:  # UnicodeDecodeError is one
            raise StreamBroken(f"not JSON in the model's stream: {data[:200]!r}") from exc
        if end != len(text) or not isinstance(chunk, dict):
            raise StreamBroken(f"not a chunk in the model's stream: {data[:200]!r}")
        if "error" in chunk:
            raise StreamBroken(f"the model's stream ended in an error: {chunk['error']}")
        self._take(chunk)

    def _take(self, chunk: dict[str, Any]) -> None:
        if not self._head:
            self._head = {k: chunk[k] for k in ("id", "created", "model") if k in chunk}
            if "system_fingerprint" in chunk:
                self._head["system_fingerprint"] = chunk["system_fingerprint"]
        if (usage := chunk.get("usage")) and isinstance(usage, dict):
            self._usage = usage
        choices = chunk.get("choices")
        if not choices or not isinstance(first := choices[0], dict):
            return
        if finish := first.get("finish_reason"):
            self._finish = str(finish)
        delta = first.get("delta")
        if not delta:
            return
        if role := delta.get("role"):
            self._role = str(role)
        content = delta.get("content")
        if content and isinstance(content, str):
            self._text += content
            self._on_text(self._text)
        if calls := delta.get("tool_calls"):
            for piece in calls:
                self._add_call(piece)

    def _add_call(self, piece: dict[str, Any]) -> None:
        index = int(piece.get("index", len(self._calls)))
        call = self._calls.setdefault(
            index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if piece.get("id"):
            call["id"] = piece["id"]
        function = piece.get("function") or {}
        if function.get("name"):
            call["function"]["name"] += function["name"]
        if function.get("arguments"):
            call["function"]["arguments"] += function["arguments"]

    def completion(self, count_tokens: Callable[[str], tuple[int, int]]) -> dict[str, Any]:
        """The answer as an unstreamed ``chat.completion``. ``count_tokens(text)`` gives
        (prompt, completion) tokens when the server sent no usage (it ignored
        ``stream_options.include_usage``)."""
        message: dict[str, Any] = {"role": self._role, "content": self._text or None}
        if self._calls:
            message["tool_calls"] = [self._calls[i] for i in sorted(self._calls)]
        usage = self._usage
        if usage is None:
            prompt, written = count_tokens(self._text)
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": written,
                "total_tokens": prompt + written,
            }
        return {
            "id": self._head.get("id", "chatcmpl-streamed"),
            "object": "chat.completion",
            "created": self._head.get("created", 0),
            "model": self._head.get("model", ""),
            **({"system_fingerprint": fp} if (fp := self._head.get("system_fingerprint")) else {}),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": self._finish or ("tool_calls" if self._calls else "stop"),
                }
            ],
            "usage": usage,
        }

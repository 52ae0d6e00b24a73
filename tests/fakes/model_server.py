"""A fake OpenAI-compatible model server on 127.0.0.1, scripted per test.

It runs on its own thread and event loop, so sync tests, async tests and gateways running
as subprocesses can all use it. The real litellm talks to it through
``CHATGATE_MODEL=openai/<name>`` and ``CHATGATE_MODEL_API_BASE=<server.base_url>``.

Each request takes the next scripted :class:`Scripted` answer, or, when the script is
empty, echoes the last user message (``"echo: <text>"``). Every request body is recorded.
"""

from __future__ import annotations

import asyncio
import collections
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.loopback import LoopbackServer

SUMMARY_ASK = "You keep the running summary"


@dataclass
class Scripted:
    """One scripted answer."""

    text: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    delay: float = 0.0
    # When set, the answer waits until the gate opens (or the server stops).
    gate: threading.Event | None = None
    # Streamed answers: seconds between chunks, whether the last chunk carries the usage
    # (as with ``stream_options.include_usage``), and a stream cut off (the connection
    # closed, no ``[DONE]``) after this many chunks.
    chunk_delay: float = 0.0
    stream_usage: bool = True
    cut_after: int | None = None


class FakeModelServer(LoopbackServer):
    """The server; use as a context manager."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []
        # Audio sent to /audio/transcriptions (model, name, data), and what it answers.
        self.transcriptions: list[dict[str, Any]] = []
        self.transcript = "please send the report on Monday"
        self._script: collections.deque[Scripted] = collections.deque()
        self._stopped = threading.Event()
        # When set: answers chatgate's summary requests (the request's text in, the new
        # summary out) instead of taking them from the script.
        self.summarise: Callable[[str], str] | None = None
        # Answers for chatgate's background requests, by how their system prompt starts
        # (e.g. ``EXTRACT_ASK``): the request's last message in, the answer out.
        self.background: dict[str, Callable[[str], str]] = {}
        # When set: decides each answer from the request body (None: the script, or echo).
        # For tests with many conversations at once, where a shared script has no order.
        self.respond: Callable[[dict[str, Any]], Scripted | None] | None = None
        self.in_flight = 0
        self.chunks_sent = 0  # of streamed answers, all told
        self.max_in_flight = 0
        self.barrier: tuple[int, float] | None = None
        self._arrived = threading.Condition()

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (ends in /v1)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *answers: Scripted | str) -> None:
        """Queue answers, in order; a plain string is a text answer."""
        with self._lock:
            for answer in answers:
                self._script.append(Scripted(text=answer) if isinstance(answer, str) else answer)

    def hold_until(self, count: int, *, timeout: float = 20.0) -> None:
        """Make every answer wait until ``count`` requests are in flight at once."""
        self.barrier = (count, timeout)

    def settings(self) -> dict[str, str]:
        """The chatgate settings that point the real litellm at this server."""
        return {
            "CHATGATE_MODEL": "openai/fake-model",
            "CHATGATE_MODEL_API_BASE": self.base_url,
            "CHATGATE_MODEL_API_KEY": "sk-test",
            "CHATGATE_MODEL_RETRIES": "0",
        }

    def user_texts(self) -> list[str]:
        """The last user message of every request, in arrival order."""
        texts = []
        for request in self.requests:
            users = [m for m in request.get("messages", []) if m.get("role") == "user"]
            texts.append(str(users[-1]["content"]) if users else "")
        return texts

    def wait_for_requests(self, count: int, *, timeout: float = 20.0) -> None:
        """Block until at least ``count`` requests have arrived."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            while len(self.requests) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(self.requests)} of {count} model requests arrived")
                self._arrived.wait(left)

    def routes(self, app: web.Application) -> None:
        """The two OpenAI routes litellm calls, with and without the /v1 prefix."""
        for prefix in ("/v1", ""):
            app.router.add_post(f"{prefix}/chat/completions", self._completions)
            app.router.add_get(f"{prefix}/models", self._models)
            app.router.add_post(f"{prefix}/audio/transcriptions", self._transcriptions)

    async def _transcriptions(self, request: web.Request) -> web.Response:
        """OpenAI's transcription route: the audio file and the model, as multipart; the
        answer is ``transcript`` (or what ``transcribe`` makes of the bytes)."""
        form = await request.post()
        upload = form.get("file")
        data = upload.file.read() if upload is not None and hasattr(upload, "file") else b""
        name = getattr(upload, "filename", None)
        self.record("transcription", {"model": form.get("model"), "name": name, "size": len(data)})
        self.transcriptions.append({"model": form.get("model"), "name": name, "data": data})
        return web.json_response({"text": self.transcript, "duration": 3.0})

    async def stopping(self) -> None:
        """Release answers still waiting on a gate or a delay."""
        self._stopped.set()

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        with self._arrived:
            self.requests.append(body)
            self._arrived.notify_all()
        messages = body.get("messages", [])
        first = str(messages[0].get("content", "")) if messages else ""
        hooks = dict(self.background)
        if self.summarise is not None:
            hooks[SUMMARY_ASK] = self.summarise
        hook = next((h for ask, h in hooks.items() if first.startswith(ask)), None)
        answer: Scripted | None = None
        if hook is not None:
            answer = Scripted(text=hook(str(messages[-1]["content"])))
        elif self.respond is not None:
            answer = self.respond(body)
        if answer is None and hook is None:
            with self._lock:
                answer = self._script.popleft() if self._script else None
        if answer is None:
            users = [m for m in body.get("messages", []) if m.get("role") == "user"]
            answer = Scripted(text=f"echo: {users[-1]['content'] if users else ''}")
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await self._wait(answer)
        finally:
            self.in_flight -= 1
        if answer.status != 200:
            error = {"error": {"message": f"scripted {answer.status}", "type": "server_error"}}
            return web.json_response(error, status=answer.status)
        if body.get("stream"):
            return await self._stream(request, body, answer)
        return web.json_response(_completion(body, answer))

    async def _wait(self, answer: Scripted) -> None:
        if self.barrier is not None:
            count, timeout = self.barrier
            deadline = time.monotonic() + timeout
            while self.in_flight < count and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        deadline = time.monotonic() + answer.delay
        while time.monotonic() < deadline and not self._stopped.is_set():
            await asyncio.sleep(min(0.05, answer.delay))
        if answer.gate is not None:
            while not answer.gate.is_set() and not self._stopped.is_set():
                await asyncio.sleep(0.01)

    async def _stream(
        self, request: web.Request, body: dict[str, Any], answer: Scripted
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for index, chunk in enumerate(_chunks(body, answer)):
            if index == answer.cut_after:
                assert request.transport is not None
                request.transport.close()
                return response
            if index and answer.chunk_delay:
                await asyncio.sleep(answer.chunk_delay)
            if not answer.stream_usage:
                chunk.pop("usage", None)
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.chunks_sent += 1
        await response.write(b"data: [DONE]\n\n")
        return response


def _usage(body: dict[str, Any], text: str) -> dict[str, int]:
    prompt = sum(len(str(m.get("content", ""))) // 4 + 1 for m in body.get("messages", []))
    completion = len(text) // 4 + 1
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _completion(body: dict[str, Any], answer: Scripted) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.text}
    if answer.tool_calls:
        message["tool_calls"] = answer.tool_calls
    return {
        "id": f"chatcmpl-fake-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if answer.tool_calls else "stop",
            }
        ],
        "usage": _usage(body, answer.text or ""),
    }


def _chunks(body: dict[str, Any], answer: Scripted) -> Iterator[dict[str, Any]]:
    base = {
        "id": f"chatcmpl-fake-{time.monotonic_ns()}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body.get("model", "fake"),
    }
    text = answer.text or ""
    yield {**base, "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
    for start in range(0, len(text), 8):
        yield {
            **base,
            "choices": [
                {"index": 0, "delta": {"content": text[start : start + 8]}, "finish_reason": None}
            ],
        }
    for index, call in enumerate(answer.tool_calls):
        delta = {"tool_calls": [{"index": index, **call}]}
        yield {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    finish = "tool_calls" if answer.tool_calls else "stop"
    yield {
        **base,
        "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
        "usage": _usage(body, text),
    }

"""The model port over litellm: retries, cooldowns and fallbacks are litellm's.

With fallbacks configured, calls go through ``litellm.Router`` (that is what it is for:
several deployments, cooldowns, fallback order). With a single model they go straight to
``litellm.acompletion`` with its own ``num_retries``: the Router's bookkeeping measured
about 2 ms of CPU per call more on this machine and buys nothing for one deployment.

litellm takes seconds to import, so nothing here imports it at module level: the first
call (or :meth:`LiteLLMModel.warm_up`, which the gateway runs in the background once it is
ready) does, in a thread so the event loop keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import structlog

from agent_core.errors import ModelError
from agent_core.model import ChatMessage, ModelReply, ToolCallRequest

log = structlog.get_logger("chatgate.model")

_PRIMARY = "chatgate-primary"
_DEFAULT_CONTEXT = 8192


def _litellm() -> Any:
    # Use the cost map shipped in the wheel instead of fetching one at import.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return importlib.import_module("litellm")


def preload() -> None:
    """Import litellm now. A process about to fork (the Celery worker's parent) does it
    once for all its children, so none pays seconds of import inside its first job."""
    _litellm()


def _known_window(litellm: Any, model: str) -> int:
    # max_input_tokens is the window; get_max_tokens() answers the *output* limit
    # (16384 for gpt-4o-mini, whose window is 128000).
    try:
        found = litellm.get_model_info(model).get("max_input_tokens")
    except Exception:
        return _DEFAULT_CONTEXT
    return int(found) if isinstance(found, int) and found > 0 else _DEFAULT_CONTEXT


def _provider(model: str) -> str:
    return model.split("/", 1)[0] if "/" in model else "openai"


@contextlib.contextmanager
def _mapped_errors(model: str) -> Iterator[None]:
    """Map litellm's (and its providers') exceptions to ModelError, once, at the edge."""
    try:
        yield
    except ModelError:
        raise
    except Exception as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelError(f"{model}: {message}") from exc


class LiteLLMModel:
    """A chat model reached through ``litellm.Router``."""

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        fallbacks: Sequence[str] = (),
        timeout: float = 120.0,
        retries: int = 2,
        context_tokens: int | None = None,
    ) -> None:
        self._model = model
        self._api_base = api_base
        self._api_key = api_key
        self._fallbacks = tuple(fallbacks)
        self._timeout = timeout
        self._retries = retries
        self._context_tokens = context_tokens
        self._router: Any = None
        self._window = context_tokens or _DEFAULT_CONTEXT
        self._lock = asyncio.Lock()

    @property
    def name(self) -> str:
        """The configured primary model."""
        return self._model

    async def warm_up(self) -> None:
        """Import litellm and build the router off the event loop."""
        async with self._lock:
            if self._router is None:
                self._router = await asyncio.to_thread(self._build_router)

    def _build_router(self) -> Any:
        log.info("loading the model library", model=self._model)
        started = time.monotonic()
        litellm = _litellm()
        log.info("model library loaded", seconds=round(time.monotonic() - started, 2))
        litellm.telemetry = False
        litellm.suppress_debug_info = True
        if not self._context_tokens:
            self._window = _known_window(litellm, self._model)
        if not self._fallbacks:
            return _Direct(litellm, self._params(self._model), retries=self._retries)
        model_list = [{"model_name": _PRIMARY, "litellm_params": self._params(self._model)}]
        names = []
        for index, fallback in enumerate(self._fallbacks):
            name = f"chatgate-fallback-{index}"
            names.append(name)
            model_list.append({"model_name": name, "litellm_params": self._params(fallback)})
        return litellm.Router(
            model_list=model_list,
            num_retries=self._retries,
            fallbacks=[{_PRIMARY: names}] if names else [],
            timeout=self._timeout,
            retry_after=0,
        )

    def _params(self, model: str) -> dict[str, Any]:
        """litellm parameters for one model. The configured endpoint and key belong to the
        primary's provider, so fallbacks of that provider share them; other providers use
        litellm's own configuration (their usual environment variables)."""
        params: dict[str, Any] = {"model": model, "timeout": self._timeout}
        if _provider(model) == _provider(self._model):
            if self._api_base:
                params["api_base"] = self._api_base
            if self._api_key:
                params["api_key"] = self._api_key
        return params

    def context_window(self) -> int:
        """The configured window, else litellm's figure for the model (looked up once, at
        warm-up), else 8192."""
        return self._window

    def count_tokens(self, messages: Sequence[ChatMessage]) -> int:
        """litellm's token count for the model (tiktoken or the provider's tokenizer)."""
        payload = [_wire(m) for m in messages]
        try:
            return int(_litellm().token_counter(model=self._model, messages=payload))
        except Exception:
            return sum(len(m.content) // 3 + 4 for m in messages)

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int,
        tools: Sequence[Mapping[str, Any]] = (),
    ) -> ModelReply:
        """One completion through the router (retries and fallbacks included)."""
        await self.warm_up()
        extra: dict[str, Any] = {"tools": list(tools)} if tools else {}
        with _mapped_errors(self._model):
            response = await self._router.acompletion(
                model=_PRIMARY,
                messages=[_wire(m) for m in messages],
                max_tokens=max_tokens,
                **extra,
            )
            message = response.choices[0].message
            usage = getattr(response, "usage", None)
            calls = tuple(
                ToolCallRequest(
                    id=str(call.id),
                    name=str(call.function.name),
                    arguments=str(call.function.arguments or "{}"),
                )
                for call in (getattr(message, "tool_calls", None) or ())
            )
            return ModelReply(
                text=message.content or "",
                model=str(getattr(response, "model", None) or self._model),
                tool_calls=calls,
                prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                cost_usd=_cost(response),
            )


class _Direct:
    """One model, no fallbacks: ``litellm.acompletion`` with its own retries, shaped like
    the Router's ``acompletion`` (the model name it is given is ignored).

    The call runs as what litellm calls an internal sub-call: it then skips its success
    and failure logging (the standard logging payload built for callbacks chatgate never
    registers, about 0.55 ms of CPU a call here, 12 %); the response, its usage and its cost
    are the same (``test_model_litellm`` holds that). That switch is litellm's private
    ``_internal_context``: where a release lacks it, the call is made plainly."""

    def __init__(self, litellm: Any, params: dict[str, Any], *, retries: int) -> None:
        self._acompletion = litellm.acompletion
        self._params = {**params, "num_retries": retries}
        self._quiet = _quiet_calls()

    async def acompletion(self, *, model: str, **kwargs: Any) -> Any:
        with self._quiet():
            return await self._acompletion(**self._params, **kwargs)


def _quiet_calls() -> Callable[[], contextlib.AbstractContextManager[None]]:
    """litellm's context for a call it neither logs nor bills itself, else a no-op."""
    try:
        internal = importlib.import_module("litellm._internal_context")
    except ImportError:
        return contextlib.nullcontext
    found = getattr(internal, "internal_sub_call", None)
    if not callable(found):
        return contextlib.nullcontext
    return cast(Callable[[], contextlib.AbstractContextManager[None]], found)


def _cost(response: Any) -> float:
    """litellm's cost for the call, from its price list (None for unpriced models)."""
    hidden = getattr(response, "_hidden_params", None) or {}
    cost = hidden.get("response_cost") if isinstance(hidden, dict) else None
    return float(cost) if isinstance(cost, int | float) and cost > 0 else 0.0


def _wire(message: ChatMessage) -> dict[str, Any]:
    """A message in the OpenAI wire format litellm takes."""
    wired: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wired["content"] = message.content or None
        wired["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        wired["tool_call_id"] = message.tool_call_id
    return wired

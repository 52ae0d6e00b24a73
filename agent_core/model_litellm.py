"""The model port over litellm.

With fallbacks configured, calls go through ``litellm.Router`` (that is what it is for:
several deployments, cooldowns, fallback order). A single model on the OpenAI
chat-completions wire (OpenAI itself, and the servers that speak it: vLLM, Ollama, LM
Studio, a gateway) is called with litellm's own transformation for its provider (request,
response, errors, price) over the HTTP client the process hands in, see :class:`_Wire`.
Any other single model (or any model, when no client is handed in) goes to
``litellm.acompletion`` with its own ``num_retries``: the Router's bookkeeping measured
about 2 ms of CPU per call more on this machine and buys nothing for one deployment.

litellm takes seconds to import, so nothing here imports it at module level: the first
call (or :meth:`LiteLLMModel.warm_up`, which the gateway runs in the background once it is
ready) does, in a thread so the event loop keeps serving.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import importlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import httpx
import structlog

from agent_core.errors import ModelError
from agent_core.model import (
    IMAGE_TOKENS,
    ChatMessage,
    HttpPoster,
    HttpUnreachable,
    ModelReply,
    TextSoFar,
    ToolCallRequest,
)
from agent_core.streamed_completion import StreamBroken, StreamedCompletion

log = structlog.get_logger("chatgate.model")

_PRIMARY = "chatgate-primary"
_DEFAULT_CONTEXT = 8192


def load_litellm() -> Any:
    """litellm, imported (Python keeps it: once a process)."""
    # Use the cost map shipped in the wheel instead of fetching one at import.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return importlib.import_module("litellm")


def preload() -> None:
    """Import litellm now. A process about to fork (the Celery worker's parent) does it
    once for all its children, so none pays seconds of import inside its first job."""
    load_litellm()


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


def same_provider(model: str, other: str) -> bool:
    """Whether two litellm model names are on the same provider (and so share the
    configured endpoint and key)."""
    return _provider(model) == _provider(other)


@contextlib.contextmanager
def mapped_errors(model: str) -> Iterator[None]:
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
        http: HttpPoster | None = None,
        vision: bool | None = None,
    ) -> None:
        """``http`` is the client for calls on the OpenAI wire (see :class:`_Wire`); the model
        closes it in :meth:`aclose`. ``vision``: whether the model reads images (None:
        litellm's model map says, at warm-up)."""
        self._model = model
        self._api_base = api_base
        self._api_key = api_key
        self._fallbacks = tuple(fallbacks)
        self._timeout = timeout
        self._retries = retries
        self._context_tokens = context_tokens
        self._http = http
        self._router: Any = None
        self._window = context_tokens or _DEFAULT_CONTEXT
        self._vision = vision
        self._sees_images = bool(vision)
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
        litellm = load_litellm()
        log.info("model library loaded", seconds=round(time.monotonic() - started, 2))
        litellm.telemetry = False
        litellm.suppress_debug_info = True
        if not self._context_tokens:
            self._window = _known_window(litellm, self._model)
        if self._vision is None:
            self._sees_images = _supports_vision(litellm, self._model)
        if not self._fallbacks:
            if self._http is not None and _Wire.serves(litellm, self._model, self._api_base):
                return _Wire(
                    litellm,
                    self._model,
                    self._http,
                    api_base=self._api_base,
                    api_key=self._api_key,
                    timeout=self._timeout,
                    retries=self._retries,
                )
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

    async def aclose(self) -> None:
        """Close the HTTP client the calls share, if one was handed in."""
        if self._http is not None:
            await self._http.aclose()

    def context_window(self) -> int:
        """The configured window, else litellm's figure for the model (looked up once, at
        warm-up), else 8192."""
        return self._window

    def count_tokens(self, messages: Sequence[ChatMessage]) -> int:
        """litellm's token count for the model (tiktoken or the provider's tokenizer)."""
        payload = [_wire(m) for m in messages]
        try:
            return int(load_litellm().token_counter(model=self._model, messages=payload))
        except Exception:
            return sum(len(m.content) // 3 + 4 + IMAGE_TOKENS * len(m.images) for m in messages)

    def sees_images(self) -> bool:
        """``vision`` as configured, else litellm's model map (known after warm-up)."""
        return self._sees_images

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int,
        tools: Sequence[Mapping[str, Any]] = (),
        on_text: TextSoFar | None = None,
    ) -> ModelReply:
        """One completion through the router (retries and fallbacks included), streamed
        when ``on_text`` is given."""
        await self.warm_up()
        extra: dict[str, Any] = {"tools": list(tools)} if tools else {}
        if on_text is not None:
            extra["on_text"] = on_text
        with mapped_errors(self._model):
            read = self._router.acompletion
            if on_text is not None and not isinstance(self._router, _Wire):
                read = functools.partial(_read_stream, self._router, retries=self._retries)
            response = await read(
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


class _Wire:
    """One model on the OpenAI chat-completions wire, with litellm's provider config for it
    (``OpenAIGPTConfig``, or the o-series' or GPT-5's where the model is one): it maps the
    parameters, builds the URL, headers and body, turns the answer into litellm's
    ``ModelResponse`` and an error into litellm's exception for it, and prices the call from
    litellm's cost map, as ``acompletion`` does. The request goes out here, on the
    process's shared client (``HttpPoster``: aiohttp in the gateway and the workers),
    instead of through ``acompletion``'s setup, the OpenAI SDK's client, its executor hop
    and its logging: about 2 ms of CPU a call on this machine instead of 8
    (``python -m bench.ladder`` shows what that does to a turn).

    Retries follow litellm's (and the OpenAI SDK's) rule: a connection error, a timeout,
    408, 409, 429 and 5xx are tried again ``retries`` times, after the ``Retry-After`` the
    server asks for (up to a minute) or an exponential backoff with jitter, unless it says
    ``x-should-retry: false``. The key and base URL come from chatgate's settings, else from
    ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` (or ``OPENAI_API_BASE``) as litellm reads them;
    ``OPENAI_ORGANIZATION`` and ``OPENAI_PROJECT_ID`` are sent as the SDK sends them."""

    def __init__(
        self,
        litellm: Any,
        model: str,
        http: HttpPoster,
        *,
        api_base: str | None,
        api_key: str | None,
        timeout: float,
        retries: int,
    ) -> None:
        name, provider, _key, found_base = litellm.get_llm_provider(model, api_base=api_base)
        utils = importlib.import_module("litellm.utils")
        providers = importlib.import_module("litellm.types.utils").LlmProviders
        self._litellm = litellm
        self._utils = utils
        self._model = model
        self._name = name
        self._config = utils.ProviderConfigManager.get_provider_chat_config(
            name, providers(provider)
        )
        base = (
            api_base
            or found_base
            or os.environ.get("OPENAI_BASE_URL")
            or os.environ.get("OPENAI_API_BASE")
            or "https://api.openai.com/v1"
        )
        key = api_key or os.environ.get("OPENAI_API_KEY")
        headers: dict[str, str] = {}
        if organization := os.environ.get("OPENAI_ORGANIZATION"):
            headers["OpenAI-Organization"] = organization
        if project := os.environ.get("OPENAI_PROJECT_ID"):
            headers["OpenAI-Project"] = project
        self._headers = self._config.validate_environment(
            headers, name, [], {}, {}, api_key=key, api_base=base
        )
        self._url = self._config.get_complete_url(base, key, name, {}, {}, stream=False)
        self._key = key
        self._timeout = timeout
        self._retries = retries
        self._http = http

    @staticmethod
    def serves(litellm: Any, model: str, api_base: str | None) -> bool:
        """Whether litellm routes this model to its OpenAI provider."""
        try:
            return bool(litellm.get_llm_provider(model, api_base=api_base)[1] == "openai")
        except Exception:
            return False

    async def acompletion(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        max_tokens: int,
        on_text: TextSoFar | None = None,
        **extra: Any,
    ) -> Any:
        config = self._config
        # As acompletion does first (it drops the None fields, as in a tool-calling turn's
        # ``content``, which some OpenAI-compatible servers refuse).
        messages = self._utils.validate_and_fix_openai_messages(messages)
        asked = {"max_tokens": max_tokens, **extra}
        if on_text is not None:
            asked |= {"stream": True, "stream_options": {"include_usage": True}}
        optional = config.map_openai_params(asked, {}, self._name, drop_params=False)
        body = config.transform_request(self._name, messages, optional, {}, self._headers)
        payload = json.dumps(body).encode()
        status, headers, content = await self._post(payload, on_text, messages)
        if status >= 400:
            raise self._error(status, headers, content)
        response = config.transform_response(
            self._name,
            httpx.Response(status, headers=headers, content=content),
            self._litellm.ModelResponse(),
            _NO_LOGGING,
            body,
            messages,
            optional,
            {},
            None,
            api_key=self._key,
        )
        try:
            cost = self._litellm.completion_cost(
                completion_response=response, model=self._name, custom_llm_provider="openai"
            )
        except Exception:  # a model litellm has no price for
            cost = 0.0
        response._hidden_params["response_cost"] = cost
        return response

    async def _post(
        self, payload: bytes, on_text: TextSoFar | None, messages: list[dict[str, Any]]
    ) -> tuple[int, httpx.Headers, bytes]:
        """The status, headers and body of the last try. A streamed answer (``on_text``) is
        read as it comes and its body put together as the unstreamed answer would be."""
        for attempt in range(self._retries + 1):
            left = self._retries - attempt
            reading = StreamedCompletion(on_text) if on_text is not None else None
            try:
                answer = await self._http.post(
                    self._url,
                    payload,
                    self._headers,
                    lines=reading.feed if reading is not None else None,
                )
                if reading is not None and answer.status < 300 and not reading.done:
                    raise HttpUnreachable("the model's stream ended before [DONE]")
            except StreamBroken as exc:
                raise ModelError(f"{self._model}: {exc}") from exc
            except HttpUnreachable as exc:
                if not left:
                    raise ModelError(f"{self._model}: {exc}") from exc
                await asyncio.sleep(self._utils.calculate_retry_after(left, self._retries))
                continue
            headers = httpx.Headers(answer.headers)
            asked = headers.get("x-should-retry", "")
            again = asked == "true" or (
                asked != "false" and self._utils.should_retry(answer.status)
            )
            if answer.status < 400 or not again or not left:
                if reading is not None and answer.status < 300:
                    whole = reading.completion(functools.partial(self._count, messages))
                    return answer.status, headers, json.dumps(whole).encode()
                return answer.status, headers, answer.body
            await asyncio.sleep(self._utils.calculate_retry_after(left, self._retries, headers))
        raise AssertionError("unreachable")  # the last try returns or raises

    def _count(self, messages: list[dict[str, Any]], text: str) -> tuple[int, int]:
        """litellm's count of a call's tokens, for a stream that came without its usage
        (as ``stream_chunk_builder`` counts them)."""
        counter = self._litellm.token_counter
        return counter(model=self._name, messages=messages), counter(model=self._name, text=text)

    def _error(self, status: int, headers: httpx.Headers, content: bytes) -> Exception:
        """litellm's exception for an error answer (``BadRequestError``, ``RateLimitError``,
        ``ContextWindowExceededError``...), as ``acompletion`` would raise it."""
        error = self._config.get_error_class(_error_text(content), status, headers)
        mapping = importlib.import_module("litellm.litellm_core_utils.exception_mapping_utils")
        try:
            mapped = mapping.exception_type(
                model=self._name, original_exception=error, custom_llm_provider="openai"
            )
        except Exception as raised:
            return raised
        return mapped if isinstance(mapped, Exception) else error


async def _read_stream(
    backend: Any,
    *,
    retries: int,
    model: str,
    messages: list[dict[str, Any]],
    on_text: TextSoFar,
    **kwargs: Any,
) -> Any:
    """A streamed ``acompletion`` (the Router's, or one model's): each piece of text told to
    ``on_text`` as it comes, then the chunks put together by litellm's
    ``stream_chunk_builder`` (which counts the tokens when the provider sent no usage) and
    priced from its cost map, as the unstreamed call is."""
    litellm = load_litellm()
    utils = importlib.import_module("litellm.utils")
    for attempt in range(retries + 1):
        # litellm retries the call that opens the stream; one that breaks off midway is
        # made again here, as the wire's is.
        stream = await backend.acompletion(
            model=model,
            messages=messages,
            stream=True,
            stream_options={"include_usage": True},
            **kwargs,
        )
        chunks: list[Any] = []
        text = ""
        try:
            async for chunk in stream:
                chunks.append(chunk)
                choices = getattr(chunk, "choices", None) or ()
                delta = getattr(choices[0], "delta", None) if choices else None
                if piece := getattr(delta, "content", None):
                    text += piece
                    on_text(text)
        except Exception:
            left = retries - attempt
            if not left:
                raise
            log.warning("the model's stream broke off; asking again", tries_left=left)
            await asyncio.sleep(utils.calculate_retry_after(left, retries))
            continue
        break
    response = litellm.stream_chunk_builder(chunks, messages=messages)
    if response is None:
        raise ModelError("the model's stream was empty")
    try:
        cost = litellm.completion_cost(completion_response=response)
    except Exception:  # a model litellm has no price for
        cost = 0.0
    response._hidden_params["response_cost"] = cost
    return response


def _error_text(raw: bytes) -> str:
    """The message of an OpenAI-style error body (``{"error": {"message": ...}}``), as the
    OpenAI SDK reports it, else the body."""
    text = raw.decode("utf-8", "replace")
    try:
        found = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return text
    return found if isinstance(found, str) else text


class _NoLogging:
    """What ``transform_response`` calls on litellm's logging object: chatgate logs and
    meters calls itself, and registers no litellm callbacks."""

    def post_call(self, *args: Any, **kwargs: Any) -> None:
        return None


_NO_LOGGING = _NoLogging()


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


def _supports_vision(litellm: Any, model: str) -> bool:
    try:
        return bool(litellm.supports_vision(model=model))
    except Exception:  # a model litellm does not know
        return False


def _wire(message: ChatMessage) -> dict[str, Any]:
    """A message in the OpenAI wire format litellm takes (images as data URLs after the
    text)."""
    wired: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.images:
        wired["content"] = [
            {"type": "text", "text": message.content},
            *(
                {
                    "type": "image_url",
                    "image_url": {
                        "url": f"data:{image.content_type};base64,"
                        + base64.b64encode(image.data).decode()
                    },
                }
                for image in message.images
            ),
        ]
    if message.tool_calls:
        wired["content"] = message.content or None
        wired["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        wired["tool_call_id"] = message.tool_call_id
    return wired


def price(model: str, *, prompt_tokens: int, completion_tokens: int) -> float | None:
    """What ``model`` would charge for these tokens by litellm's price list (None when the
    list does not know the model): dry runs estimate with it."""
    litellm = load_litellm()
    try:
        prompt, completion = litellm.cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
    except Exception:  # litellm raises a bare Exception for an unmapped model
        return None
    return float(prompt) + float(completion)

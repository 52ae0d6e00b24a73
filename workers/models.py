"""The model clients a process builds from its settings: the configured model (and the
summary model), a profile's or a replay's model on its own server, each built once."""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from agent_core.model import Model
from agent_core.profiles import Applied
from agent_core.settings import Settings

log = structlog.get_logger("chatgate.worker")


def build_model(settings: Settings, name: str | None = None) -> Model | None:
    """The configured model (or the model ``name`` on the same provider settings), or None
    when ``CHATGATE_MODEL`` is unset."""
    if not settings.model:
        return None
    key = settings.model_api_key.get_secret_value() if settings.model_api_key else None
    return _litellm(settings, name or settings.model, api_base=settings.model_api_base,
                    api_key=key, fallbacks=settings.fallback_models,
                    context_tokens=settings.model_context_tokens)  # fmt: skip


def model_named(
    settings: Settings, name: str, *, api_base: str | None, fallbacks: Sequence[str] = ()
) -> Model:
    """The model ``name`` on ``api_base``, or on the settings' server and key when it is on
    the same provider as ``CHATGATE_MODEL`` (a profile's, a replay's)."""
    from agent_core.model_litellm import same_provider

    shared = same_provider(name, settings.model or "")
    key = settings.model_api_key.get_secret_value() if settings.model_api_key else None
    return _litellm(settings, name, api_base=api_base or (settings.model_api_base if shared
                    else None), api_key=key if shared else None, fallbacks=fallbacks,
                    context_tokens=settings.model_context_tokens if shared else None)  # fmt: skip


def _litellm(
    settings: Settings,
    name: str,
    *,
    api_base: str | None,
    api_key: str | None,
    fallbacks: Sequence[str],
    context_tokens: int | None,
) -> Model:
    """A litellm model with the settings' timeout, retries and vision, on this process's
    shared HTTP client."""
    from agent_core.model_litellm import LiteLLMModel
    from workers.http_poster import AiohttpPoster

    return LiteLLMModel(
        name,
        api_base=api_base,
        api_key=api_key,
        fallbacks=list(fallbacks),
        timeout=settings.model_timeout,
        retries=settings.model_retries,
        context_tokens=context_tokens,
        http=AiohttpPoster(timeout=settings.model_timeout),
        vision={"auto": None, "true": True, "false": False}[settings.model_vision],
    )


class ProfileModels:
    """The model each profile names (with its server and fallbacks), built the first time
    a turn needs it, once; where it is the settings' own, the process's model."""

    def __init__(self, settings: Settings, default: Model | None) -> None:
        self._settings = settings
        self._default = default
        self._built: dict[tuple[str, str | None, tuple[str, ...]], Model] = {}

    def __call__(self, applied: Applied) -> Model | None:
        settings = self._settings
        if applied.model is None:
            return None
        key = (applied.model, applied.api_base, applied.fallbacks)
        if key == (settings.model, settings.model_api_base, tuple(settings.fallback_models)):
            return self._default
        found = self._built.get(key)
        if found is None:
            found = self._built[key] = self._build(applied.model, applied.api_base, key[2])
        return found

    def _build(self, name: str, api_base: str | None, fallbacks: tuple[str, ...]) -> Model:
        return model_named(self._settings, name, api_base=api_base, fallbacks=fallbacks)

    def built(self) -> list[Model]:
        """The models built for profiles (the process closes them at the end)."""
        return list(self._built.values())


async def close_models(*models: Model | None) -> None:
    """Close each model once (the summarizer may be the model itself); a failure is logged."""
    for model in {id(m): m for m in models if m is not None}.values():
        try:
            await model.aclose()
        except Exception:
            log.exception("closing the model client failed", model=model.name)

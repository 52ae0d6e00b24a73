"""Speech to text for voice notes and audio files (``CHATGATE_TRANSCRIBE_MODEL``): the
``Transcriber`` port through litellm, which ``agent_core.model_litellm`` loads."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_core.model import Transcript
from agent_core.model_litellm import load_litellm, mapped_errors


class LiteLLMTranscriber:
    """Speech to text through ``litellm.atranscription`` (OpenAI's ``/audio/transcriptions``
    and the providers litellm maps to it), priced from litellm's cost map."""

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
    ) -> None:
        self._model = model
        self._params: dict[str, Any] = {"model": model, "timeout": timeout}
        if api_base:
            self._params["api_base"] = api_base
        if api_key:
            self._params["api_key"] = api_key

    async def transcribe(self, name: str, data: bytes) -> Transcript:
        """The words of ``data`` (an audio file called ``name``)."""
        litellm = await asyncio.to_thread(load_litellm)
        with mapped_errors(self._model):
            response = await litellm.atranscription(file=(name, data), **self._params)
        hidden = getattr(response, "_hidden_params", None) or {}
        cost = hidden.get("response_cost") if isinstance(hidden, dict) else None
        duration = getattr(response, "duration", None)
        return Transcript(
            text=str(getattr(response, "text", "") or "").strip(),
            model=self._model,
            cost_usd=float(cost or 0.0),
            seconds=float(duration) if isinstance(duration, (int, float)) else None,
        )

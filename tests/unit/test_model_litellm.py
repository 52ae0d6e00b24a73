"""The litellm model port: what it learns at warm-up, off the event loop."""

from __future__ import annotations

from agent_core.model_litellm import LiteLLMModel


async def test_the_window_is_looked_up_once_at_warm_up() -> None:
    """A known model's window comes from litellm's map at warm-up; a configured one wins."""
    known = LiteLLMModel("openai/gpt-4o-mini", api_base="http://127.0.0.1:9/v1")
    assert known.context_window() == 8192  # not loaded yet: nothing is imported on the loop
    await known.warm_up()
    assert known.context_window() == 128_000
    configured = LiteLLMModel("openai/gpt-4o-mini", context_tokens=4096)
    await configured.warm_up()
    assert configured.context_window() == 4096
    unknown = LiteLLMModel("openai/some-local-model")
    await unknown.warm_up()
    assert unknown.context_window() == 8192

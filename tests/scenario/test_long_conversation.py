"""A 500-turn conversation in a small window: every request fits, carries the system
prompt and the current task verbatim, and still knows what was said on turn 3 (through the
running summary, folded by the summary model as history outgrows the window)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.fakes.model_server import FakeModelServer
from tests.scenario.conftest import ClientFactory
from tests.scenario.test_web_api import _post

SYSTEM = "You are the release assistant for Project Kestrel. Answer in one short sentence."
WINDOW = 1500
REPLY = 200
TURNS = 500
FACT = "remember: the release code word is PELICAN"


def _summarise(request: str) -> str:
    """A stand-in summary model: keeps the earlier summary and every fact worth keeping."""
    previous, _, new = request.partition("\n\nNew messages:\n")
    previous = previous.removeprefix("Summary so far:\n")
    kept = [] if previous == "(none)" else previous.splitlines()
    kept += [line for line in new.splitlines() if "remember:" in line]
    return "\n".join(dict.fromkeys(kept))


@pytest.mark.slow
async def test_turn_500_still_has_the_instructions_and_the_fact_from_turn_3(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    import litellm

    model_server.summarise = _summarise
    client = await make_client(
        model_server,
        CHATGATE_SYSTEM_PROMPT=SYSTEM,
        CHATGATE_MODEL_CONTEXT_TOKENS=str(WINDOW),
        CHATGATE_REPLY_MAX_TOKENS=str(REPLY),
    )
    conversation = ""
    for turn in range(1, TURNS + 1):
        text = FACT if turn == 3 else f"status update {turn}: the build is green, tests pass"
        accepted = await _post(client, "kestrel", text)
        conversation = accepted["conversation_id"]
        deadline = time.monotonic() + 20
        url = f"/api/conversations/{conversation}/messages?after={accepted['message_id']}"
        while True:
            items = (await (await client.get(url)).json())["items"]
            if any(i["role"] == "assistant" for i in items):
                break
            assert time.monotonic() < deadline, f"turn {turn} not answered"
            await asyncio.sleep(0.005)
    answers = [r for r in model_server.requests if not _is_summary(r)]
    summaries = [r for r in model_server.requests if _is_summary(r)]
    assert len(answers) == TURNS
    assert summaries, "the history never outgrew the window"
    for number, request in enumerate(answers, start=1):
        messages = request["messages"]
        assert litellm.token_counter(model="gpt-4o-mini", messages=messages) <= WINDOW - REPLY
        assert messages[0]["role"] == "system"
        assert messages[0]["content"].startswith(SYSTEM)  # verbatim, first
        task = FACT if number == 3 else f"status update {number}: the build is green, tests pass"
        assert messages[-1] == {"role": "user", "content": task}  # verbatim, last
        if number > 3:
            assert "PELICAN" in "\n".join(str(m["content"]) for m in messages), number
    assert "PELICAN" in answers[-1]["messages"][0]["content"]  # by then, from the summary


def _is_summary(request: dict[str, Any]) -> bool:
    return str(request["messages"][0]["content"]).startswith("You keep the running summary")

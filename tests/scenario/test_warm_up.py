"""When the gateway loads the model library: at start by default, so the first reply after
a deploy does not wait seconds for it; with ``CHATGATE_MODEL_WARM_UP=false``, only when a
model call needs it."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.fakes.gateway import GatewayProcess
from tests.fakes.model_server import FakeModelServer

pytestmark = pytest.mark.any_database


def _litellm_imports(log: str) -> list[str]:
    # ``importlib.import_module`` skips -X importtime's line for the package itself.
    return re.findall(r"^import time:.*\|\s+litellm\.main$", log, flags=re.MULTILINE)


def _wait(condition: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_the_model_is_loaded_at_start_unless_told_to_wait_for_the_first_call(
    tmp_path: Path, database_url: str, model_server: FakeModelServer
) -> None:
    gateway = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        PYTHONPROFILEIMPORTTIME="1",
        **model_server.settings(),
    )
    gateway.fork = False  # what a start imports is the subject: a real start
    try:
        gateway.start(CHATGATE_MODEL_WARM_UP="true")
        # Loading begins as the gateway starts, with no message in sight.
        _wait(lambda: "loading the model library" in gateway.log)
        _wait(lambda: _litellm_imports(gateway.log))
        assert model_server.requests == []
        assert gateway.terminate() == 0

        gateway.start(CHATGATE_MODEL_WARM_UP="false")
        time.sleep(1)
        second = gateway.log.split("--- start 2 ---", 1)[1]
        assert "loading the model library" not in second
        accepted = gateway.post("desk", "hello")
        gateway.wait_for_replies(str(accepted["conversation_id"]), 1, timeout=60)
        second = gateway.log.split("--- start 2 ---", 1)[1]
        assert second.count("loading the model library") == 1
        assert len(_litellm_imports(second)) == 1
        assert len(model_server.requests) == 1
    finally:
        gateway.kill()

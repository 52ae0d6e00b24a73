"""A message that was acknowledged is never lost, and its reply is delivered exactly once.

The real ``chatgate gateway`` runs as a subprocess and is killed with SIGKILL at each step
boundary of a turn; after a restart the turn finishes with exactly one reply.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.gateway import GatewayProcess
from tests.fakes.model_server import FakeModelServer, Scripted


@pytest.fixture
def gateway(
    database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> Iterator[GatewayProcess]:
    """A gateway subprocess on this test's database, talking to the fake model."""
    process = GatewayProcess(database_url=database_url, workdir=tmp_path, **model_server.settings())
    yield process
    process.stop()


def _assistant(items: list[dict[str, object]]) -> list[object]:
    return [item["text"] for item in items if item["role"] == "assistant"]


def test_killed_during_the_model_call_replies_once_after_restart(
    gateway: GatewayProcess, model_server: FakeModelServer
) -> None:
    """SIGKILL after the 202 and before the reply: the next start answers, exactly once."""
    never = threading.Event()
    model_server.script(Scripted(text="lost with the process", gate=never), "after restart")
    gateway.start()
    accepted = gateway.post("general", "are you there?", id="m-1")
    model_server.wait_for_requests(1)
    gateway.kill()
    gateway.start()
    items = gateway.wait_settled(accepted["conversation_id"])
    assert _assistant(items) == ["after restart"]
    assert [i["role"] for i in items] == ["user", "assistant"]
    assert model_server.user_texts() == ["are you there?", "are you there?"]


@pytest.mark.parametrize(
    ("point", "model_calls"),
    [("after_model_call", 1), ("after_reply_intent", 1), ("after_send", 1)],
)
def test_killed_at_each_step_boundary_delivers_exactly_once(
    gateway: GatewayProcess, model_server: FakeModelServer, point: str, model_calls: int
) -> None:
    """Journaled steps are not redone: one model call, one reply, whatever the crash point."""
    model_server.script("the only answer")
    gateway.start(CHATGATE_TEST_FAULT=point)
    accepted = gateway.post("general", "hello", id="m-1")
    assert gateway.wait_exit() == -9, gateway.log
    gateway.start(CHATGATE_TEST_FAULT="")
    items = gateway.wait_settled(accepted["conversation_id"])
    assert _assistant(items) == ["the only answer"]
    assert len(model_server.requests) == model_calls


def test_killed_right_after_the_ledger_write_answers_the_retry_once(
    gateway: GatewayProcess, model_server: FakeModelServer
) -> None:
    """Death between the ledger commit and the HTTP answer: the client's retry (same id)
    is a duplicate, and the stored message is answered once after restart."""
    gateway.start(CHATGATE_TEST_FAULT="after_accept")
    with pytest.raises(OSError):
        gateway.post("general", "hello", id="m-1")
    assert gateway.wait_exit() == -9
    gateway.start(CHATGATE_TEST_FAULT="")
    retry = gateway.post("general", "hello", id="m-1")
    assert retry["duplicate"] is True
    assert _assistant(gateway.wait_settled(retry["conversation_id"])) == ["echo: hello"]
    assert len(model_server.requests) == 1


def test_the_same_event_across_a_restart_makes_one_turn(
    gateway: GatewayProcess, model_server: FakeModelServer
) -> None:
    """The ledger outlives the process: a redelivery after restart is dropped."""
    gateway.start()
    first = gateway.post("general", "hello", id="evt-1")
    gateway.wait_settled(first["conversation_id"])
    assert gateway.terminate() == 0
    gateway.start()
    again = gateway.post("general", "hello", id="evt-1")
    assert again["duplicate"] is True
    assert again["turn_id"] == first["turn_id"]
    assert len(gateway.wait_settled(first["conversation_id"])) == 2
    assert len(model_server.requests) == 1


def test_sigterm_drains_the_turn_in_flight(
    gateway: GatewayProcess, model_server: FakeModelServer
) -> None:
    """SIGTERM waits for the running turn to deliver its reply before exiting 0."""
    model_server.script(Scripted(text="finished while draining", delay=1.5))
    gateway.start()
    accepted = gateway.post("general", "slow one", id="m-1")
    model_server.wait_for_requests(1)
    assert gateway.terminate() == 0
    gateway.start()
    items = gateway.messages(accepted["conversation_id"])
    assert _assistant(items) == ["finished while draining"]
    assert len(model_server.requests) == 1


def test_a_turn_that_outlives_the_drain_resumes_on_the_next_start(
    gateway: GatewayProcess, model_server: FakeModelServer
) -> None:
    """SIGTERM with a model call slower than CHATGATE_DRAIN_SECONDS: exit 0 without waiting,
    and the next start finishes the turn with exactly one reply."""
    model_server.script(Scripted(text="too slow", delay=10), "second try")
    gateway.start(CHATGATE_DRAIN_SECONDS="0.5")
    accepted = gateway.post("general", "slow one", id="m-1")
    model_server.wait_for_requests(1)
    started = time.monotonic()
    assert gateway.terminate() == 0
    # Well before the model would have answered (a loaded machine stops slowly too).
    assert time.monotonic() - started < 7
    gateway.start()
    items = gateway.wait_settled(accepted["conversation_id"])
    assert _assistant(items) == ["second try"]
    assert len(model_server.requests) == 2


def test_chatgate_run_killed_mid_turn_answers_at_once_after_a_restart(
    gateway: GatewayProcess, model_server: FakeModelServer
) -> None:
    """With the default 30 s lease, SIGKILL during the model call and start again: the new
    process proves the old one gone (same machine, its pid dead) and answers within
    seconds instead of after the lease."""
    never = threading.Event()
    model_server.script(Scripted(text="lost with the process", gate=never), "after restart")
    gateway.start(command="run", CHATGATE_LEASE_SECONDS="30")
    accepted = gateway.post("general", "are you there?", id="m-1")
    model_server.wait_for_requests(1)
    gateway.kill()
    gateway.start(command="run", CHATGATE_LEASE_SECONDS="30")
    items = gateway.wait_settled(accepted["conversation_id"], timeout=15)
    assert _assistant(items) == ["after restart"]
    assert len(model_server.requests) == 2
    assert "took over the leases of processes that are gone" in gateway.log

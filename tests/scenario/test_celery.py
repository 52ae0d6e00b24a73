"""The scaled profile against the real Redis: a gateway, a Celery worker and a beat as
separate processes; a worker SIGKILLed mid-run, and the run completes once after restart."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from agent_core.events import utcnow
from agent_core.settings import Settings
from agent_core.storage.database import Database
from agent_core.storage.store import Store
from tests.fakes.gateway import GatewayProcess, RoleProcess, http
from tests.fakes.http_echo import EchoServer, http_allowed_config
from tests.fakes.model_server import FakeModelServer, Scripted
from tests.scenario.test_schedules import _assistant, _journal, _wait_for
from tests.scenario.test_tool_crashes import tool_call
from tests.unit.test_dispatcher import _conversation, _schedules
from workers.celery_app import QUEUE, CeleryJobQueue, make_celery
from workers.dispatcher import ScheduleDispatcher


@pytest.fixture
def roles(
    database_url: str,
    model_server: FakeModelServer,
    echo: EchoServer,
    redis_url: str,
    tmp_path: Path,
) -> Iterator[tuple[GatewayProcess, RoleProcess, RoleProcess]]:
    """A gateway, a worker and a beat on one database and one Redis."""
    config = http_allowed_config(tmp_path / "chatgate.toml", echo)
    settings = {
        "CHATGATE_DATABASE_URL": database_url,
        "CHATGATE_REDIS_URL": redis_url,
        "CHATGATE_CONFIG": str(config),
        "CHATGATE_STATE_DIR": str(tmp_path / "state"),
        "CHATGATE_LEASE_SECONDS": "2",
        "CHATGATE_SCHEDULE_TICK_SECONDS": "0.5",
        "CHATGATE_SCHEDULE_MIN_SECONDS": "1",
        **model_server.settings(),
    }
    gateway = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        **{k: v for k, v in settings.items() if k != "CHATGATE_DATABASE_URL"},
    )
    worker = RoleProcess("worker", workdir=tmp_path, settings=settings)
    beat = RoleProcess("beat", workdir=tmp_path, settings=settings)
    yield gateway, worker, beat
    for process in (worker, beat):
        process.stop()
    gateway.stop()


def test_worker_and_beat_refuse_to_start_without_redis(tmp_path: Path) -> None:
    for command in ("worker", "beat"):
        role = RoleProcess(command, workdir=tmp_path, settings={})
        role.start()
        assert role.process is not None
        assert role.process.wait(30) == 2
        assert "CHATGATE_REDIS_URL" in role.log


def test_a_worker_killed_mid_run_completes_the_run_once_after_restart(
    roles: tuple[GatewayProcess, RoleProcess, RoleProcess],
    model_server: FakeModelServer,
    echo: EchoServer,
    database_url: str,
) -> None:
    gateway, worker, beat = roles
    never = threading.Event()
    model_server.script(
        tool_call("http_request", {"method": "POST", "url": f"http://{echo.host}/charge"}),
        Scripted(text="lost with the worker", gate=never),
        "Charged once.",
    )
    gateway.start()
    worker.start("--concurrency", "1")
    beat.start()
    accepted = gateway.post("desk", "/bg charge the card", id="m-1")
    conversation_id = str(accepted["conversation_id"])
    model_server.wait_for_requests(2, timeout=60)  # the tool ran; the second call hangs
    worker.kill()
    worker.start("--concurrency", "1")
    items = _wait_for(gateway, conversation_id, "Charged once.", timeout=60)
    time.sleep(1.5)
    items = gateway.messages(conversation_id)
    assert _assistant(items) == ["Charged once."], worker.log
    assert echo.effects() == 1
    assert len(model_server.requests) == 3
    steps, job = _journal(database_url)
    assert steps == [("tool_call", "done")]
    assert job.status == "done"
    assert job.receipt


def test_a_schedule_fires_through_beat_and_worker(
    roles: tuple[GatewayProcess, RoleProcess, RoleProcess],
    model_server: FakeModelServer,
) -> None:
    gateway, worker, beat = roles
    model_server.script(
        tool_call("schedule_task", {"prompt": "Say the time", "schedule": "in 2s"}),
        "Scheduled.",
        "It is time.",
    )
    gateway.start()
    # Every import the worker's processes make, with its module, goes to the log.
    worker.settings["PYTHONPROFILEIMPORTTIME"] = "1"
    worker.fork = False  # what its start imports is the subject: a real start
    worker.start("--concurrency", "2")
    beat.start()
    accepted = gateway.post("desk", "tell me the time in 2 seconds", id="m-1")
    conversation_id = str(accepted["conversation_id"])
    _wait_for(gateway, conversation_id, "It is time.", timeout=60)
    time.sleep(1.5)
    assert _assistant(gateway.messages(conversation_id)) == ["Scheduled.", "It is time."]
    # litellm was imported once, by the parent before it forked its pool: no child paid
    # the seconds of that import (under a job's lease) in its first job.
    # (``importlib.import_module`` skips -X importtime's line for the package itself.)
    imports = re.findall(r"^import time:.*\|\s+litellm\.main$", worker.log, flags=re.MULTILINE)
    assert len(imports) == 1, imports
    assert worker.log.index(imports[0]) < worker.log.index(" ready.")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_run_with_redis_starts_a_worker_and_a_beat_that_die_with_it(
    roles: tuple[GatewayProcess, RoleProcess, RoleProcess],
    model_server: FakeModelServer,
) -> None:
    gateway, _worker, _beat = roles
    model_server.script("background answer")
    gateway.start(command="run")
    assert gateway.pid is not None
    accepted = gateway.post("desk", "/bg work on it", id="m-1")
    _wait_for(gateway, str(accepted["conversation_id"]), "background answer", timeout=60)
    children = _children(gateway.pid)
    assert len(children) == 2, gateway.log
    # SIGKILL of `chatgate run` alone (not its group): the children must not outlive it.
    assert gateway.process is not None
    gateway.process.kill()
    gateway.process.wait(10)
    deadline = time.monotonic() + 10
    while any(_alive(child) for child in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(child) for child in children)


async def test_a_message_a_worker_took_and_never_started_is_sent_again(
    database: Database, redis_url: str
) -> None:
    store = Store(database)
    schedules = _schedules(store)
    conversation_id = await _conversation(store)
    now = utcnow()
    await schedules.create(
        conversation_id=conversation_id,
        user="web:alice",
        prompt="p",
        spec="every 1h",
        now=now - timedelta(hours=1, seconds=1),
    )
    app = make_celery(Settings(redis_url=redis_url))
    queue = CeleryJobQueue(app, store)
    dispatcher = ScheduleDispatcher(
        store,
        schedules,
        queue,
        resend_after=timedelta(hours=1),
        backlog=queue.waiting,
        stranded_after=timedelta(seconds=30),
    )
    try:
        assert (await dispatcher.tick(now)).jobs == 1
        assert await queue.waiting() == 1
        # Still in the broker, a minute on: the workers are busy, nothing is stranded.
        assert (await dispatcher.tick(now + timedelta(minutes=1))).resent == 0
        with app.connection_for_write() as connection:
            # A worker takes the message and never acknowledges or starts it.
            taken = connection.default_channel.basic_get(QUEUE, no_ack=False)
            assert taken is not None
            assert await queue.waiting() == 0
            assert (await dispatcher.tick(now + timedelta(seconds=10))).resent == 0
            assert (await dispatcher.tick(now + timedelta(seconds=40))).resent == 1
            assert await queue.waiting() == 1
            again = connection.default_channel.basic_get(QUEUE, no_ack=True)
            assert again.payload == taken.payload
    finally:
        queue.close()


def test_a_background_turn_asks_in_its_conversation_and_a_worker_resumes_it(
    roles: tuple[GatewayProcess, RoleProcess, RoleProcess],
    model_server: FakeModelServer,
) -> None:
    """``bg`` on a worker: ``ask_user`` posts its question in the conversation and the
    job waits (nothing holds the worker); the answer, pressed at the gateway, puts the job
    back on the queue, and a worker started afresh finishes it with the choice."""
    gateway, worker, beat = roles
    question = {"question": "Which region?", "options": ["eu", "us"]}
    model_server.script(tool_call("ask_user", question), "Running it in the eu.")
    gateway.start()
    worker.start("--concurrency", "1")
    beat.start()
    accepted = gateway.post("desk", "/bg run the report", id="m-1")
    conversation_id = str(accepted["conversation_id"])
    deadline = time.monotonic() + 60
    while not (asked := [i for i in gateway.messages(conversation_id) if i.get("approval")]):
        assert time.monotonic() < deadline, worker.log
        time.sleep(0.1)
    worker.kill()
    worker.start("--concurrency", "1")
    approval_id = asked[0]["approval"]["id"]
    status, body = http("POST", f"{gateway.url}/api/questions/{approval_id}", {"choice": 0})
    assert status == 200, body
    _wait_for(gateway, conversation_id, "Running it in the eu.", timeout=60)
    time.sleep(1.5)
    assert _assistant(gateway.messages(conversation_id)) == ["Running it in the eu."]
    assert len(model_server.requests) == 2
    assert '"answer": "eu"' in model_server.requests[1]["messages"][-1]["content"]

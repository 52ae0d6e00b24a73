"""Scale-out under fire: 2 gateways, 2 Celery workers and 2 beats on PostgreSQL and Redis.

Messages across many conversations go to both gateways (a message whose gateway is gone is
sent again, same id, to the other one, as a load balancer or a platform's retry would),
some need an approval (pressed on whichever gateway is up), and two conversations have a
schedule firing every 2 seconds. In the middle one gateway, one worker and one beat are
SIGKILLed; later the other gateway is restarted with SIGTERM (a rolling restart). Then:
every message is answered exactly once and in order, every approved tool ran once (one
effect per idempotency key), and every schedule slot fired once, with no slot missed.

``CHATGATE_SOAK_MESSAGES`` / ``CHATGATE_SOAK_CONVERSATIONS`` (default 200 / 20) scale it;
``make soak`` runs a longer one.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from agent_core.events import utcnow
from agent_core.storage.database import Database
from agent_core.storage.schema import conversations, jobs, schedule_runs, schedules
from tests.conftest import BACKEND
from tests.fakes.gateway import GatewayProcess, RoleProcess, http
from tests.fakes.http_echo import EchoServer
from tests.fakes.model_server import FakeModelServer, Scripted
from tests.scenario.test_tool_crashes import tool_call

MESSAGES = int(os.environ.get("CHATGATE_SOAK_MESSAGES", "200"))
CONVERSATIONS = int(os.environ.get("CHATGATE_SOAK_CONVERSATIONS", "20"))
SECONDS = 300 + MESSAGES // 2  # the whole test's limit; the answers get most of it

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(SECONDS),
    pytest.mark.skipif(BACKEND != "postgresql", reason="scale-out runs on PostgreSQL and Redis"),
]
PER_CONVERSATION = max(1, MESSAGES // CONVERSATIONS)
CHARGE_AT = 5  # the message of each conversation that needs an approval
SCHEDULED = 2  # conversations with a schedule
EVERY = 2  # seconds between a schedule's slots
_TAG = re.compile(r"c\d+ m\d+")


def _text(c: int, n: int) -> str:
    if n == 0:
        return f"c{c} m0 schedule a tick"
    if n == CHARGE_AT:
        return f"c{c} m{n} please charge"
    return f"c{c} m{n}"


def _expected(c: int) -> list[str]:
    answers = [f"scheduled c{c}"] if c < SCHEDULED else []
    for n in range(1, PER_CONVERSATION + 1):
        answers.append(f"charged c{c} m{n}" if n == CHARGE_AT else f"echo: c{c} m{n}")
    return answers


def _plain(answers: list[str]) -> list[str]:
    return [a for a in answers if not a.startswith("charged")]


def _respond(echo: EchoServer) -> Any:
    """The model: charge (a tool needing approval), schedule, or echo, by the message."""

    def respond(body: dict[str, Any]) -> Scripted | None:
        messages = body.get("messages", [])
        users = [str(m["content"]) for m in messages if m.get("role") == "user"]
        said = users[-1] if users else ""
        tag = _TAG.search(said)
        if messages and messages[-1].get("role") == "tool":
            called = next(m for m in reversed(messages) if m.get("tool_calls"))
            name = called["tool_calls"][0]["function"]["name"]
            return Scripted(text=f"charged {tag.group()}" if name == "http_request" and tag
                            else f"scheduled {said.split()[0]}")  # fmt: skip
        if said.endswith("please charge") and tag:
            url = f"http://{echo.host}/charge/{tag.group().replace(' ', '/')}"
            return tool_call("http_request", {"method": "POST", "url": url})
        if said.endswith("schedule a tick"):
            c = said.split()[0]
            return tool_call(
                "schedule_task", {"prompt": f"tick for {c}", "schedule": f"every {EVERY}s"}
            )
        if said.startswith("tick for"):
            return Scripted(text=f"echo: {said}", delay=0.5)  # a job long enough to cut
        return Scripted(text=f"echo: {said}", delay=0.02)  # a model takes a moment

    return respond


class Cluster:
    """Two of each role; the test's driver is the load balancer."""

    def __init__(self, tmp_path: Path, settings: dict[str, str]) -> None:
        gateway_settings = {k: v for k, v in settings.items() if k != "CHATGATE_DATABASE_URL"}
        self.gateways = [
            GatewayProcess(
                database_url=settings["CHATGATE_DATABASE_URL"],
                workdir=self._dir(tmp_path, f"gateway{i}"),
                **gateway_settings,
            )
            for i in range(2)
        ]
        self.workers = [
            RoleProcess("worker", workdir=self._dir(tmp_path, f"worker{i}"), settings=settings)
            for i in range(2)
        ]
        self.beats = [
            RoleProcess("beat", workdir=self._dir(tmp_path, f"beat{i}"), settings=settings)
            for i in range(2)
        ]
        self.down: set[int] = set()

    @staticmethod
    def _dir(root: Path, name: str) -> Path:
        path = root / name
        path.mkdir()
        return path

    def up(self) -> list[GatewayProcess]:
        return [g for i, g in enumerate(self.gateways) if i not in self.down]

    def call(self, prefer: int, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """Try the preferred gateway, then the other: what a load balancer does."""
        order = [prefer % 2, (prefer + 1) % 2]
        last: tuple[int, Any] = (0, "no gateway answered")
        for _ in range(100):
            for index in order:
                if index in self.down:
                    continue
                try:
                    status, reply = http(method, self.gateways[index].url + path, body, timeout=10)
                except OSError as exc:
                    last = (0, str(exc))
                    continue
                if status < 500:
                    return status, reply
                last = (status, reply)
            time.sleep(0.1)
        raise AssertionError(f"{method} {path}: {last}")

    def logs(self) -> str:
        """The end of every process's log, and (with py-spy at hand) where each one is."""
        parts = []
        for process in (*self.gateways, *self.workers, *self.beats):
            name = getattr(process, "command", "gateway")
            parts.append(f"===== {name} {process.workdir.name} =====\n{process.log[-20000:]}")
            if process.process is not None and process.process.poll() is None:
                parts.append(_stacks(process.process.pid))
        return "\n".join(parts)

    def stop(self) -> None:
        for process in (*self.workers, *self.beats, *self.gateways):
            process.stop()


@pytest.fixture
def cluster(
    database_url: str,
    model_server: FakeModelServer,
    echo: EchoServer,
    redis_url: str,
    tmp_path: Path,
) -> Iterator[Cluster]:
    config = tmp_path / "chatgate.toml"
    config.write_text(
        f'[tools.http_request]\nallowed_hosts = ["{echo.entry}"]\n\n'
        '[[policy]]\ntool = "http_request"\ndecision = "ask"\n'
    )
    settings = {
        "CHATGATE_DATABASE_URL": database_url,
        "CHATGATE_REDIS_URL": redis_url,
        "CHATGATE_CONFIG": str(config),
        "CHATGATE_STATE_DIR": str(tmp_path / "state"),
        "CHATGATE_LEASE_SECONDS": "2",
        "CHATGATE_SCHEDULE_TICK_SECONDS": "0.5",
        "CHATGATE_SCHEDULE_MIN_SECONDS": "1",
        "CHATGATE_DRAIN_SECONDS": "5",
        "CHATGATE_LOG_LEVEL": "info",
        **model_server.settings(),
    }
    model_server.respond = _respond(echo)
    built = Cluster(tmp_path, settings)
    yield built
    built.stop()


class Driver:
    """Sends every conversation's messages in order and presses approval buttons."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.ids: dict[int, str] = {}
        self.sent = 0
        self.approved: set[str] = set()
        # The URLs of tool calls cut short by a kill whose re-run a person approved.
        self.recovered: set[str] = set()
        self._lock = threading.Lock()
        self.done = threading.Event()

    def send(self, c: int, n: int) -> None:
        body = {"conversation": f"soak-{c}", "text": _text(c, n), "id": f"c{c}-m{n}"}
        status, reply = self.cluster.call(c + n, "POST", "/api/messages", body)
        assert status == 202, (status, reply)
        with self._lock:
            self.ids[c] = str(reply["conversation_id"])
            self.sent += 1

    def conversation(self, c: int) -> None:
        for n in range(1, PER_CONVERSATION + 1):
            self.send(c, n)
            time.sleep(0.1)

    def press_approvals(self) -> None:
        turn = 0
        while not self.done.is_set():
            for conversation_id in list(self.ids.values()):
                turn += 1
                status, body = self.cluster.call(
                    turn, "GET", f"/api/conversations/{conversation_id}/messages"
                )
                if status != 200:
                    continue
                for item in body["items"]:
                    approval = item.get("approval") or {}
                    if item["role"] == "approval" and approval.get("status") == "pending":
                        self.cluster.call(
                            turn,
                            "POST",
                            f"/api/approvals/{approval['id']}",
                            {"decision": "approve"},
                        )
                        self.approved.add(approval["id"])
                        if approval.get("kind") == "recovery":  # may this call run again?
                            self.recovered.add(str(approval["arguments"].get("url", "")))
            time.sleep(0.2)

    def answers(self, c: int) -> list[str]:
        status, body = self.cluster.call(c, "GET", f"/api/conversations/{self.ids[c]}/messages")
        assert status == 200
        return [
            str(i["text"])
            for i in body["items"]
            if i["role"] == "assistant" and not str(i["text"]).startswith("echo: tick")
        ]

    def ticks(self, c: int) -> int:
        status, body = self.cluster.call(c, "GET", f"/api/conversations/{self.ids[c]}/messages")
        assert status == 200
        return sum(str(i["text"]) == f"echo: tick for c{c}" for i in body["items"])


def _owners(database_url: str) -> tuple[list[str], list[str]]:
    """Who holds conversation leases and job leases right now."""
    return _db(  # type: ignore[no-any-return]
        database_url,
        lambda conn: (
            list(
                conn.execute(
                    select(conversations.c.lease_owner).where(
                        conversations.c.lease_expires_at > utcnow()
                    )
                ).scalars()
            ),
            list(
                conn.execute(select(jobs.c.lease_owner).where(jobs.c.status == "running")).scalars()
            ),
        ),
    )


def _group(owner: str) -> int | None:
    """The process group of a lease owner (``host:pid:nonce``)."""
    try:
        return os.getpgid(int(owner.split(":")[1]))
    except (ProcessLookupError, ValueError, IndexError):
        return None


def _kill_mid_work(cluster: Cluster, database_url: str) -> dict[str, int]:
    """SIGKILL gateway 0 while it holds conversation leases, the worker that runs a job,
    and beat 0; return how many leases and jobs each kill cut short."""
    gateway, started = cluster.gateways[0], time.monotonic()
    while True:
        leases, running = _owners(database_url)
        lanes = [o for o in leases if _group(o) == gateway.pid]
        # Both at once if that comes within 20 s (a scheduled job runs half a second in
        # two, and the gateway's turns are short and come in bursts: 5 s missed the overlap
        # once in a full PostgreSQL pass), else any moment the gateway holds leases.
        if lanes and (running or time.monotonic() - started > 20):
            break
        assert time.monotonic() - started < 30, "gateway 0 held no conversation lease for 30 s"
        time.sleep(0.02)
    groups = [_group(o) for o in running]
    worker = next((w for w in cluster.workers if w.process and w.process.pid in groups), None)
    worker = worker or cluster.workers[0]
    cluster.down.add(0)
    for process in (gateway, worker, cluster.beats[0]):
        process.kill()
    jobs_cut = sum(1 for g in groups if worker.process and g == worker.process.pid)
    return {"lanes_cut": len(lanes), "jobs_cut": jobs_cut}


def _stacks(group: int) -> str:
    """``py-spy dump`` of every process in a process group, when py-spy is installed."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        return ""
    dumps = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _group(f"x:{entry.name}") == group:
            done = subprocess.run(
                [spy, "dump", "--pid", entry.name], capture_output=True, text=True, timeout=30
            )
            dumps.append(done.stdout + done.stderr)
    return "\n".join(dumps)


def _until(condition: Any, cluster: Cluster, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, cluster.logs()
        time.sleep(0.1)


def _db(database_url: str, fn: Any) -> Any:
    async def run() -> Any:
        database = Database(database_url)
        try:
            return await database.write(fn)
        finally:
            await database.dispose()

    return asyncio.run(run())


def test_two_of_each_role_lose_and_repeat_nothing_when_one_of_each_is_killed(
    cluster: Cluster, echo: EchoServer, database_url: str
) -> None:
    for gateway in cluster.gateways:
        gateway.start()
    for process in (*cluster.workers, *cluster.beats):
        process.start(*(("--concurrency", "2") if process.command == "worker" else ()))
    driver = Driver(cluster)
    presser = threading.Thread(target=driver.press_approvals, daemon=True)
    presser.start()
    started = time.monotonic()
    total = SCHEDULED + PER_CONVERSATION * CONVERSATIONS
    try:
        # The schedules first, so their jobs run while everything else happens.
        for c in range(SCHEDULED):
            driver.send(c, 0)
        for c in range(SCHEDULED):
            _until(lambda c=c: f"scheduled c{c}" in driver.answers(c), cluster)
        with ThreadPoolExecutor(CONVERSATIONS) as pool:
            sending = [pool.submit(driver.conversation, c) for c in range(CONVERSATIONS)]
            while driver.sent < total // 3 and not any(f.done() for f in sending):
                time.sleep(0.05)
            # In the middle: SIGKILL one gateway while it runs turns, the worker running a
            # job (when one runs within a few seconds), and one beat.
            hit = _kill_mid_work(cluster, database_url)
            killed_at = driver.sent
            while driver.sent < 2 * total // 3 and not all(f.done() for f in sending):
                time.sleep(0.05)
            # The killed gateway comes back; then the other one is rolled (SIGTERM).
            cluster.gateways[0].start()
            cluster.down.discard(0)
            cluster.down.add(1)
            assert cluster.gateways[1].terminate(timeout=60) == 0, cluster.gateways[1].log
            cluster.gateways[1].start()
            cluster.down.discard(1)
            for future in sending:
                future.result()
        deadline = time.monotonic() + SECONDS - 120
        for c in range(CONVERSATIONS):
            while len(driver.answers(c)) < len(_expected(c)) and time.monotonic() < deadline:
                time.sleep(0.2)
        while min(driver.ticks(c) for c in range(SCHEDULED)) < 5 and time.monotonic() < deadline:
            time.sleep(0.2)
        # Stop the schedules where they are, and let what is running finish.
        _db(database_url, lambda conn: conn.execute(update(schedules).values(status="paused")))
        unfinished = select(jobs.c.id).where(jobs.c.status.in_(("queued", "running")))
        _until(lambda: not _db(database_url, lambda conn: conn.execute(unfinished).all()), cluster)
        time.sleep(1.0)  # anything answered twice would show by now
    finally:
        driver.done.set()
        presser.join(10)
    elapsed = time.monotonic() - started

    for c in range(CONVERSATIONS):
        answers = driver.answers(c)
        # In order, once each; the charge is answered when approved (the conversation
        # goes on meanwhile), so only after the message before it.
        expected = _expected(c)
        assert _plain(answers) == _plain(expected), f"conversation {c}: {answers}\n{cluster.logs()}"
        for charge in set(expected) - set(_plain(expected)):
            assert answers.count(charge) == 1, f"conversation {c}: {answers}\n{cluster.logs()}"
            before = expected[expected.index(charge) - 1]
            assert answers.index(charge) > answers.index(before), answers
    charges: dict[str, list[str | None]] = collections.defaultdict(list)
    for method, path, headers in echo.requests:
        assert method == "POST"
        charges[path].append(headers.get("idempotency-key"))
    assert len(charges) == (CONVERSATIONS if PER_CONVERSATION >= CHARGE_AT else 0)
    for path, keys in charges.items():
        # Once; twice only when a kill cut the call short and a person approved the re-run,
        # and then with the same idempotency key, so the charge itself happened once.
        again = any(url.endswith(path) for url in driver.recovered)
        assert len(keys) == 1 or (again and len(keys) == 2 and len(set(keys)) == 1), (path, keys)
    assert len(driver.approved) == len(charges) + len(driver.recovered)
    assert hit["lanes_cut"] > 0, "the gateway was killed while it ran no turn"
    assert hit["jobs_cut"] > 0, "the worker was killed while it ran no job"

    runs = _db(
        database_url,
        lambda conn: conn.execute(
            select(schedules.c.id, schedule_runs.c.scheduled_for, jobs.c.status, jobs.c.id)
            .join(schedule_runs, schedule_runs.c.schedule_id == schedules.c.id)
            .join(jobs, jobs.c.run_id == schedule_runs.c.id)
            .order_by(schedules.c.id, schedule_runs.c.scheduled_for)
        ).all(),
    )
    by_schedule: dict[str, list[Any]] = collections.defaultdict(list)
    for schedule_id, slot, status, _job in runs:
        by_schedule[schedule_id].append((slot, status))
    assert len(by_schedule) == SCHEDULED
    for slots in by_schedule.values():
        assert len(slots) >= 5, slots
        assert all(status == "done" for _slot, status in slots), f"{slots}\n{cluster.logs()}"
        gaps = {b[0] - a[0] for a, b in itertools.pairwise(slots)}
        assert gaps == {timedelta(seconds=EVERY)}, slots  # none missed, none twice
    fired = sorted(len(s) for s in by_schedule.values())
    assert sorted(driver.ticks(c) for c in range(SCHEDULED)) == fired, cluster.logs()
    print(
        json.dumps(
            {
                "messages": total,
                "killed_after": killed_at,
                **hit,
                "approvals": len(driver.approved),
                "recoveries": len(driver.recovered),
                "schedule_runs": fired,
                "seconds": round(elapsed, 1),
            }
        )
    )

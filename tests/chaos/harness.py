"""Chaos: two gateways, two workers and two beats on a PostgreSQL and a Redis of their own,
while a random process is SIGKILLed at a random moment every few seconds, PostgreSQL and
Redis are crashed and started again, and the model answers 429s and hangs past its timeout.

Traffic comes the way each platform sends it: signed Slack Events API requests (a thread
per conversation, retried until Slack gets its 200, as Slack retries), Telegram webhook
updates (retried until 200, as Telegram does), web chat messages (retried, same id, on
the other gateway, as a load balancer would), each to either gateway, and Discord
messages (a mention in a guild channel, and DMs) over the gateway session of whichever
gateway holds it, sent once: Discord sends nothing again, so what is written while the
holder is dead is for the next session's catch-up to find. Some messages
call a tool that reads (``GET``, run freely), some one that charges (``POST``, asked for
approval, pressed on the web API), and two conversations hold a schedule firing every 2 s.

Every message carries a tag the fake model echoes, so afterwards each message's replies
are counted where the platform shows them (Slack's thread, Telegram's chat, Discord's
channels, the web conversation), side effects where the echo server saw them, and
schedule slots in the database. ``run`` returns the figures; ``ZEROS`` names those that must be 0.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.engine import Connection

from agent_core.storage.database import Database
from agent_core.storage.schema import (
    conversations,
    jobs,
    messages,
    schedule_runs,
    schedules,
    turn_steps,
    turns,
)
from tests.fakes.discord_server import CHANNEL as DISCORD_CHANNEL
from tests.fakes.discord_server import GUILD as DISCORD_GUILD
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.gateway import GatewayProcess, RoleProcess, http
from tests.fakes.http_echo import EchoServer
from tests.fakes.model_server import FakeModelServer, Scripted
from tests.fakes.servers import ThrowawayPostgres, ThrowawayRedis
from tests.fakes.slack_server import BOT_USER, TEAM, FakeSlack, signed_headers
from tests.fakes.telegram_server import WEBHOOK_SECRET, FakeTelegram

ZEROS = (
    "harness_errors",  # a traffic or fault thread that died: less was tested than claimed
    "duplicated_replies",  # Telegram's resends in its window are counted apart (README)
    "lost_messages",
    "duplicated_side_effects",
    "stuck_turns",
    "given_up",
    "slots_fired_twice",
    "slots_missed",
)
"""The figures that must be 0 for a run to pass."""

SLACK_CHANNEL = "C0CHAOS"
EVERY = 2  # seconds between a schedule's slots
_TAG = re.compile(r"\b[wstd]\d+m\d+\b")


@dataclass(frozen=True)
class Plan:
    """How long and how hard."""

    seconds: float = 60.0  # the traffic and kill phase
    kill_every: tuple[float, float] = (1.0, 3.0)  # random pause between two kills
    postgres_restarts: int = 1
    redis_restarts: int = 1
    conversations: int = 4  # per platform (web, Slack, Telegram, Discord)
    pause: tuple[float, float] = (0.3, 1.2)  # between a conversation's messages
    model_429: float = 0.04  # share of model requests answered 429
    model_hang: float = 0.03  # share answered only after the model timeout
    seed: int = 1


@dataclass
class _Kill:
    at: float
    role: str
    conversations: list[str] = field(default_factory=list)


class _Process:
    """One role's process, killable and restartable."""

    def __init__(self, name: str, proc: GatewayProcess | RoleProcess, args: tuple[str, ...]):
        self.name = name
        self.proc = proc
        self.args = args
        self.lock = threading.Lock()

    @property
    def gateway(self) -> GatewayProcess | None:
        return self.proc if isinstance(self.proc, GatewayProcess) else None

    def launch(self) -> None:
        if isinstance(self.proc, GatewayProcess):
            self.proc.launch()
        else:
            self.proc.start(*self.args)

    def alive(self) -> bool:
        process = self.proc.process
        return process is not None and process.poll() is None

    @property
    def pid(self) -> int | None:
        process = self.proc.process
        return None if process is None else process.pid


class Chaos:
    """Build with a plan and a work directory; ``run()`` returns the figures."""

    def __init__(self, plan: Plan, workdir: Path) -> None:
        self.plan = plan
        self.workdir = workdir
        self.random = random.Random(plan.seed)
        self.postgres = ThrowawayPostgres()
        self.redis = ThrowawayRedis()
        self.model = FakeModelServer()
        self.echo = EchoServer()
        self.slack = FakeSlack()
        self.telegram = FakeTelegram()
        self.discord = FakeDiscord()
        self.stop = threading.Event()
        self.kills: list[_Kill] = []
        self.sent: dict[str, str] = {}  # tag -> platform
        self.web_ids: dict[int, str] = {}
        self.approved: set[str] = set()
        self.recovered: set[str] = set()
        self.rss: list[tuple[float, int, int]] = []  # (time, kB, turns finished)
        self.errors: list[str] = []
        # (server, down at, up again at), Unix time.
        self.outages: list[tuple[str, float, float]] = []
        self.slots_in_outages: collections.Counter[str] = collections.Counter()
        self.stuck_detail: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._update_ids = itertools.count(10_000)
        self._message_ids = itertools.count(20_000)
        self.processes: list[_Process] = []

    # -- set-up -------------------------------------------------------------------------

    def _settings(self) -> dict[str, str]:
        config = self.workdir / "chatgate.toml"
        config.write_text(
            f'[tools.http_request]\nallowed_hosts = ["{self.echo.entry}"]\n\n'
            '[[policy]]\ntool = "http_request"\nargs = { method = "GET" }\n'
            'decision = "allow"\n\n'
            '[[policy]]\ntool = "http_request"\ndecision = "ask"\n'
        )
        return {
            "CHATGATE_DATABASE_URL": self.postgres.url,
            "CHATGATE_REDIS_URL": self.redis.url,
            "CHATGATE_CONFIG": str(config),
            "CHATGATE_STATE_DIR": str(self.workdir / "state"),
            "CHATGATE_ACCESS": "open",
            "CHATGATE_LEASE_SECONDS": "10",
            "CHATGATE_SCHEDULE_TICK_SECONDS": "0.5",
            "CHATGATE_SCHEDULE_MIN_SECONDS": "1",
            "CHATGATE_DRAIN_SECONDS": "5",
            "CHATGATE_LOG_LEVEL": "info",
            "CHATGATE_MODEL_TIMEOUT": "3",
            # Each conversation here is one busy person: well past the default limits.
            "CHATGATE_RATE_BURST": "1000",
            "CHATGATE_RATE_PER_MINUTE": "6000",
            **self.model.settings(),
            "CHATGATE_MODEL_RETRIES": "4",
            **self.slack.settings(),
            **self.telegram.settings(webhook=True),
            **self.discord.settings(),
        }

    def _build(self) -> None:
        settings = self._settings()
        gateway_settings = {k: v for k, v in settings.items() if k != "CHATGATE_DATABASE_URL"}
        for i in range(2):
            workdir = self.workdir / f"gateway{i}"
            workdir.mkdir()
            proc = GatewayProcess(
                database_url=settings["CHATGATE_DATABASE_URL"], workdir=workdir, **gateway_settings
            )
            # The harness decides the lease; the test default of 2 s would hide its cost.
            proc.settings["CHATGATE_LEASE_SECONDS"] = settings["CHATGATE_LEASE_SECONDS"]
            self.processes.append(_Process(f"gateway{i}", proc, ()))
        for role, args in (("worker", ("--concurrency", "2")), ("beat", ())):
            for i in range(2):
                workdir = self.workdir / f"{role}{i}"
                workdir.mkdir()
                proc_role = RoleProcess(role, workdir=workdir, settings=settings)
                self.processes.append(_Process(f"{role}{i}", proc_role, args))

    @property
    def gateways(self) -> list[GatewayProcess]:
        return [p.gateway for p in self.processes if p.gateway is not None]

    # -- the model ----------------------------------------------------------------------

    def _respond(self, body: dict[str, Any]) -> Scripted | None:
        roll = self.random.random()
        if roll < self.plan.model_429:
            return Scripted(status=429)
        if roll < self.plan.model_429 + self.plan.model_hang:
            return Scripted(text="too late", delay=4.0)  # past CHATGATE_MODEL_TIMEOUT
        said_messages = body.get("messages", [])
        users = [str(m["content"]) for m in said_messages if m.get("role") == "user"]
        said = users[-1] if users else ""
        tag = _TAG.search(said)
        if said_messages and said_messages[-1].get("role") == "tool":
            called = next(m for m in reversed(said_messages) if m.get("tool_calls"))
            name = called["tool_calls"][0]["function"]["name"]
            if name == "schedule_task":
                return Scripted(text=f"scheduled {said.split()[0]}")
            arguments = json.loads(called["tool_calls"][0]["function"]["arguments"])
            verb = "charged" if arguments.get("method") == "POST" else "status of"
            return Scripted(text=f"{verb} {tag.group() if tag else '?'}")
        if tag and said.endswith("please charge"):
            url = f"http://{self.echo.host}/charge/{tag.group()}"
            return _tool("http_request", {"method": "POST", "url": url})
        if tag and said.endswith("check status"):
            url = f"http://{self.echo.host}/status/{tag.group()}"
            return _tool("http_request", {"method": "GET", "url": url})
        if said.endswith("schedule a tick"):
            return _tool(
                "schedule_task",
                {"prompt": f"tick for {said.split()[0]}", "schedule": f"every {EVERY}s"},
            )
        if said.startswith("tick for"):
            return Scripted(text=f"tock: {said}", delay=0.3)
        return Scripted(text=f"echo: {tag.group() if tag else said}", delay=0.05)

    # -- traffic ------------------------------------------------------------------------

    def _text(self, tag: str, n: int) -> str:
        if n % 7 == 3:
            return f"{tag} check status"
        return tag

    def _to_a_gateway(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        """What a load balancer (or a platform's retry) does: try gateways until one
        answers below 500; give up after two minutes."""
        deadline = time.monotonic() + 120
        last: Any = None
        while time.monotonic() < deadline:
            for gateway in self.random.sample(self.gateways, 2):
                try:
                    status, reply = http(method, gateway.url + path, timeout=10, **kwargs)
                except OSError as exc:
                    last = exc
                    continue
                if status < 500:
                    return status, reply
                last = (status, reply)
            time.sleep(0.2)
        raise AssertionError(f"{method} {path}: no gateway answered: {last}")

    def _web(self, c: int, stop_at: float) -> None:
        conversation = f"chaos-{c}"
        if c < 2:
            self._send_web(conversation, c, f"w{c}m0", f"w{c}m0 schedule a tick")
        for n in itertools.count(1):
            if time.monotonic() > stop_at or self.stop.is_set():
                return
            tag = f"w{c}m{n}"
            text = f"{tag} please charge" if n == 2 else self._text(tag, n)
            self._send_web(conversation, c, tag, text)
            time.sleep(self.random.uniform(*self.plan.pause))

    def _send_web(self, conversation: str, c: int, tag: str, text: str) -> None:
        body = {"conversation": conversation, "text": text, "id": tag}
        status, reply = self._to_a_gateway("POST", "/api/messages", body=body)
        assert status == 202, (status, reply)
        with self._lock:
            self.web_ids[c] = str(reply["conversation_id"])
            self.sent[tag] = "web"

    def _slack(self, c: int, stop_at: float) -> None:
        root = f"{1700000000 + c * 1000}.000000"
        for n in itertools.count(0):
            if time.monotonic() > stop_at or self.stop.is_set():
                return
            tag = f"s{c}m{n}"
            ts = f"{1700000000 + c * 1000}.{n:06d}"
            event: dict[str, Any] = {
                "type": "app_mention" if n == 0 else "message",
                "user": "U0ALICE",
                "text": f"<@{BOT_USER}> {self._text(tag, n)}" if n == 0 else self._text(tag, n),
                "ts": ts,
                "channel": SLACK_CHANNEL,
                "event_ts": ts,
            }
            if n:
                event |= {"thread_ts": root, "channel_type": "channel"}
            payload = {
                "token": "unused",
                "team_id": TEAM,
                "api_app_id": "A0CHATGATE",
                "type": "event_callback",
                "event_id": f"Ev{c:04d}{n:06d}",
                "event_time": int(time.time()),
                "event": event,
            }
            raw = json.dumps(payload)
            for attempt in itertools.count():
                headers = {"Content-Type": "application/json", **signed_headers(raw)}
                if attempt:
                    headers |= {"X-Slack-Retry-Num": str(attempt), "X-Slack-Retry-Reason": "x"}
                status, reply = self._to_a_gateway(
                    "POST", "/slack/events", raw=raw.encode(), headers=headers
                )
                if status == 200:
                    break
                assert attempt < 20, (status, reply)
                time.sleep(0.5)
            with self._lock:
                self.sent[tag] = "slack"
            time.sleep(self.random.uniform(*self.plan.pause))

    def _telegram(self, c: int, stop_at: float) -> None:
        chat = 7_000 + c
        for n in itertools.count(0):
            if time.monotonic() > stop_at or self.stop.is_set():
                return
            tag = f"t{c}m{n}"
            update = {
                "update_id": next(self._update_ids),
                "message": {
                    "message_id": next(self._message_ids),
                    "date": int(time.time()),
                    "chat": {"id": chat, "type": "private", "first_name": "Tess"},
                    "from": {"id": chat, "is_bot": False, "first_name": "Tess"},
                    "text": self._text(tag, n),
                },
            }
            headers = {
                "Content-Type": "application/json",
                "X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET,
            }
            status, reply = self._to_a_gateway(
                "POST", "/telegram/webhook", raw=json.dumps(update).encode(), headers=headers
            )
            assert status == 200, (status, reply)
            with self._lock:
                self.sent[tag] = "telegram"
            time.sleep(self.random.uniform(*self.plan.pause))

    def _discord(self, c: int, stop_at: float) -> None:
        """A person on Discord: the first conversation mentions the bot in a guild
        channel, the others write to it in DMs. Each message is sent once."""
        in_guild = c == 0
        channel = DISCORD_CHANNEL if in_guild else str(1_250_000_000_000_000_000 + c)
        author = str(310_000_000_000_000_000 + c)
        for n in itertools.count(0):
            if time.monotonic() > stop_at or self.stop.is_set():
                return
            tag = f"d{c}m{n}"
            self.discord.message_create(
                self._text(tag, n),
                author=author,
                channel=channel,
                guild=DISCORD_GUILD if in_guild else None,
                mention=in_guild,
                connected=False,  # whoever is connected hears it; if nobody, nobody
            )
            with self._lock:
                self.sent[tag] = "discord"
            time.sleep(self.random.uniform(*self.plan.pause))

    def _discord_sessions(self, stop_at: float) -> None:
        """What Discord does to a session now and then: cut its connection (the client
        resumes, and Discord replays what it missed), or end it (the client identifies a
        new one, which hears nothing sent before: the catch-up's work)."""
        for n in itertools.count():
            wake = time.monotonic() + self.random.uniform(5.0, 12.0)
            while time.monotonic() < min(wake, stop_at) and not self.stop.is_set():
                time.sleep(0.1)
            if time.monotonic() >= stop_at or self.stop.is_set():
                return
            if n % 2:
                self.discord.drop()
            else:
                self.discord.invalidate()

    def _items(self, conversation_id: str) -> list[dict[str, Any]]:
        """Every item of a web conversation (the API answers 500 at a time)."""
        items: list[dict[str, Any]] = []
        while True:
            after = items[-1]["id"] if items else 0
            status, body = self._to_a_gateway(
                "GET", f"/api/conversations/{conversation_id}/messages?after={after}"
            )
            assert status == 200, body
            items += body["items"]
            if len(body["items"]) < 500:
                return items

    def _press_approvals(self) -> None:
        """A person who approves whatever is asked in the web conversations."""
        while not self.stop.is_set():
            for conversation_id in list(self.web_ids.values()):
                try:
                    items = self._items(conversation_id)
                except AssertionError:
                    continue
                for item in items:
                    approval = item.get("approval") or {}
                    if item["role"] != "approval" or approval.get("status") != "pending":
                        continue
                    with contextlib.suppress(AssertionError):
                        self._to_a_gateway(
                            "POST",
                            f"/api/approvals/{approval['id']}",
                            body={"decision": "approve"},
                        )
                        self.approved.add(approval["id"])
                        if approval.get("kind") == "recovery":
                            self.recovered.add(str(approval["arguments"].get("url", "")))
            time.sleep(0.3)

    def _recorded(self, run: Callable[[], None]) -> Callable[[], None]:
        """A thread's body whose exception is kept for the figures, not lost."""

        def body() -> None:
            try:
                run()
            except BaseException as exc:
                with self._lock:
                    self.errors.append(f"{threading.current_thread().name}: {exc!r}")
                raise

        return body

    # -- faults -------------------------------------------------------------------------

    def _killer(self, stop_at: float, steady: _Process) -> None:
        """SIGKILL a random live process (never ``steady``, whose memory is measured) at a
        random moment, and start it again a moment later."""
        while time.monotonic() < stop_at and not self.stop.is_set():
            wake = time.monotonic() + self.random.uniform(*self.plan.kill_every)
            while time.monotonic() < min(wake, stop_at):
                time.sleep(0.05)
            if time.monotonic() >= stop_at:
                return
            victims = [p for p in self.processes if p is not steady and p.alive()]
            if not victims:
                continue
            victim = self.random.choice(victims)
            held = self._held_by(victim.pid) if victim.gateway is not None else []
            with victim.lock:
                victim.proc.kill()
            self.kills.append(_Kill(at=time.time(), role=victim.name, conversations=held))
            threading.Thread(target=self._restart, args=(victim,), daemon=True).start()

    def _restart(self, process: _Process) -> None:
        time.sleep(self.random.uniform(0.2, 1.0))
        with process.lock:
            if not process.alive():
                process.launch()

    def _outages(self, stop_at: float) -> None:
        """Crash PostgreSQL and Redis (down for 1-3 s each), spread over the run."""
        plan = ["postgres"] * self.plan.postgres_restarts + ["redis"] * self.plan.redis_restarts
        self.random.shuffle(plan)
        started = time.monotonic()
        span = stop_at - started
        for index, which in enumerate(plan):
            at = started + span * (index + 1) / (len(plan) + 1)
            while time.monotonic() < at and not self.stop.is_set():
                time.sleep(0.1)
            if self.stop.is_set():
                return
            # Redis stays down past a schedule's 2 s period: some slot falls due meanwhile.
            down = self.random.uniform(2.2, 3.0 if which == "redis" else 2.5)
            at_down = time.time()
            if which == "postgres":
                self.postgres.restart(crash=True, down_for=down)
            else:
                self.redis.restart(kill=True, down_for=down)
            self.outages.append((which, at_down, time.time()))

    def _sample_memory(self, steady: _Process) -> None:
        gateway = steady.gateway
        assert gateway is not None
        while not self.stop.is_set():
            pid = steady.pid
            with contextlib.suppress(OSError, ValueError, IndexError, AssertionError):
                rss = _rss_kb(pid) if pid else None
                status, text = http("GET", f"{gateway.url}/metrics", timeout=5)
                finished = _metric(str(text), "chatgate_turns_finished_total")
                if rss is not None and status == 200:
                    self.rss.append((time.monotonic(), rss, int(finished)))
            time.sleep(1.0)

    # -- the database -------------------------------------------------------------------

    def _db(self, fn: Callable[[Connection], Any]) -> Any:
        async def run() -> Any:
            database = Database(self.postgres.url)
            try:
                return await database.write(fn)
            finally:
                await database.dispose()

        return asyncio.run(run())

    def _held_by(self, pid: int | None) -> list[str]:
        """The conversations whose lease ``pid`` holds while a turn of theirs runs (nothing
        when PostgreSQL is down)."""
        if pid is None:
            return []
        try:
            rows = self._db(
                lambda conn: conn.execute(
                    select(conversations.c.id, conversations.c.lease_owner)
                    .join(turns, turns.c.conversation_id == conversations.c.id)
                    .where(conversations.c.lease_owner.is_not(None), turns.c.status == "running")
                    .distinct()
                ).all()
            )
        except Exception:
            return []
        return [cid for cid, owner in rows if owner.split(":")[1:2] == [str(pid)]]

    # -- the run ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _running(self) -> Iterator[None]:
        with self.model, self.echo, self.slack, self.telegram, self.discord:
            self.model.respond = self._respond
            self.postgres.start()
            self.redis.start()
            try:
                self._build()
                yield
            finally:
                self.stop.set()
                for process in self.processes:
                    process.proc.stop()
                self.postgres.close()
                self.redis.close()

    def run(self) -> dict[str, Any]:
        """Run the plan; return the figures (``ZEROS`` must be 0)."""
        with self._running():
            return self._run()

    def _run(self) -> dict[str, Any]:
        for gateway in self.gateways:
            gateway.start()
        for process in self.processes:
            if process.gateway is None:
                process.launch()
        steady = self.processes[1]
        started = time.monotonic()
        stop_at = started + self.plan.seconds
        threads = [
            threading.Thread(target=self._killer, args=(stop_at, steady), daemon=True),
            threading.Thread(target=self._outages, args=(stop_at,), daemon=True),
            threading.Thread(target=self._press_approvals, daemon=True),
            threading.Thread(target=self._sample_memory, args=(steady,), daemon=True),
            threading.Thread(target=self._discord_sessions, args=(stop_at,), daemon=True),
        ]
        for c in range(self.plan.conversations):
            for target in (self._web, self._slack, self._telegram, self._discord):
                threads.append(threading.Thread(target=target, args=(c, stop_at), daemon=True))
        for thread in threads:
            thread.run = self._recorded(thread.run)  # type: ignore[method-assign]
            thread.start()
        traffic = threads[5:]
        for thread in traffic:
            thread.join(self.plan.seconds + 300)
        faults = threads[:2]
        for thread in faults:
            thread.join(120)
        for process in self.processes:
            with process.lock:
                if not process.alive():
                    process.launch()
        settle_started = time.monotonic()
        stuck = self._settle(timeout=max(180.0, self.plan.seconds / 2))
        settle_seconds = time.monotonic() - settle_started
        self.stop.set()
        figures = self._figures(stuck)
        figures["seconds"] = round(time.monotonic() - started, 1)
        figures["settle_seconds"] = round(settle_seconds, 1)
        return figures

    def _settle(self, *, timeout: float) -> int:
        """Pause the schedules, then wait until no turn is open, no approval pending and
        no job queued or running; return how many turns are still open after ``timeout``."""
        self._db(lambda conn: conn.execute(update(schedules).values(status="paused")))
        deadline = time.monotonic() + timeout

        def busy(conn: Connection) -> tuple[int, int]:
            open_turns = conn.execute(
                select(func.count())
                .select_from(turns)
                .where(turns.c.status.in_(("pending", "running", "waiting")))
            ).scalar_one()
            open_jobs = conn.execute(
                select(func.count())
                .select_from(jobs)
                .where(jobs.c.status.in_(("queued", "running")))
            ).scalar_one()
            return int(open_turns), int(open_jobs)

        quiet = 0
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                open_turns, open_jobs = self._db(busy)
                if open_turns == open_jobs == 0:
                    quiet += 1
                    if quiet >= 3:  # a moment for anything answered twice to show
                        return 0
                else:
                    quiet = 0
            time.sleep(0.5)
        open_turns, open_jobs = self._db(busy)
        self.stuck_detail = self._db(_stuck_detail)
        return open_turns + open_jobs

    # -- figures ------------------------------------------------------------------------

    def _replies(self) -> collections.Counter[str]:
        """How many replies carry each tag, where each platform shows them."""
        counted: collections.Counter[str] = collections.Counter()
        texts = [str(m.get("text") or "") for m in self.slack.messages]
        texts += [str(m.get("text") or "") for m in self.telegram.delivered]
        texts += [str(m.get("content") or "") for m in self.discord.created]
        for conversation_id in self.web_ids.values():
            items = self._items(conversation_id)
            texts += [str(i["text"]) for i in items if i["role"] == "assistant"]
        for text in texts:
            if text.startswith("tock:"):
                continue
            for tag in set(_TAG.findall(text)):
                counted[tag] += 1
        return counted

    def _side_effects(self) -> int:
        """Effects that happened twice: a path reached with two idempotency keys (or twice
        with none), or a charge (POST) sent twice unless a person approved re-running a
        call cut short by a kill (then with the same key, so the server made one)."""
        keys: dict[str, set[str]] = collections.defaultdict(set)
        posts: collections.Counter[str] = collections.Counter()
        for method, path, headers in self.echo.requests:
            keys[path].add(headers.get("idempotency-key") or f"none-{len(keys[path])}")
            if method == "POST":
                posts[path] += 1
        twice = {path for path, found in keys.items() if len(found) > 1}
        for path, count in posts.items():
            if count > 1 and not any(url.endswith(path) for url in self.recovered):
                twice.add(path)
        return len(twice)

    def _slots(self) -> tuple[int, int, int]:
        """(slots fired, fired twice, missed) over every schedule's runs: a slot with two
        jobs, or whose job's turn answered twice, fired twice; a gap between slots, or a
        slot whose job finished without its answer, is missed."""
        answers = (
            select(func.count())
            .select_from(messages)
            .where(messages.c.turn_id == jobs.c.turn_id, messages.c.role == "assistant")
            .scalar_subquery()
        )
        rows = self._db(
            lambda conn: conn.execute(
                select(
                    schedule_runs.c.schedule_id,
                    schedule_runs.c.scheduled_for,
                    jobs.c.status,
                    answers,
                )
                .join(jobs, jobs.c.run_id == schedule_runs.c.id)
                .order_by(schedule_runs.c.schedule_id, schedule_runs.c.scheduled_for)
            ).all()
        )
        by_schedule: dict[str, list[datetime]] = collections.defaultdict(list)
        twice = missed = fired = 0
        self.slots_in_outages = collections.Counter(
            which
            for _schedule, slot, _status, _answered in rows
            for which, down, up in self.outages
            if down <= slot.timestamp() <= up
        )
        for schedule_id, slot, status, answered in rows:
            by_schedule[schedule_id].append(slot)
            twice += answered > 1
            missed += status == "done" and answered == 0
        for slots in by_schedule.values():
            fired += len(set(slots))
            for a, b in itertools.pairwise(slots):
                gap = b - a
                if gap == timedelta(0):
                    twice += 1
                elif gap > timedelta(seconds=EVERY):
                    missed += int(gap / timedelta(seconds=EVERY)) - 1
        return fired, twice, missed

    def _turns_per_tag(self) -> collections.Counter[str]:
        """How many stored user messages (each opens a turn) carry each tag."""
        texts = self._db(
            lambda conn: (
                conn.execute(select(messages.c.text).where(messages.c.role == "user"))
                .scalars()
                .all()
            )
        )
        found: collections.Counter[str] = collections.Counter()
        for text in texts:
            for tag in set(_TAG.findall(str(text))):
                found[tag] += 1
        return found

    def _kill_to_answer(self) -> tuple[list[float], int]:
        """Seconds from each gateway kill to each conversation it was running a turn of
        answering again, and how many never answered after it."""
        replies = self._db(
            lambda conn: conn.execute(
                select(messages.c.conversation_id, messages.c.created_at).where(
                    messages.c.role.in_(("assistant", "system", "approval"))
                )
            ).all()
        )
        by_conversation: dict[str, list[datetime]] = collections.defaultdict(list)
        for conversation_id, created in replies:
            by_conversation[conversation_id].append(created)
        found = []
        silent = 0
        for kill in self.kills:
            for conversation_id in kill.conversations:
                after = [
                    t.timestamp() - kill.at
                    for t in by_conversation.get(conversation_id, [])
                    if t.timestamp() > kill.at
                ]
                if after:
                    found.append(min(after))
                else:
                    silent += 1
        return found, silent

    def _figures(self, stuck: int) -> dict[str, Any]:
        counted = self._replies()
        sent = dict(self.sent)
        twice = sorted(tag for tag in sent if counted[tag] > 1)
        turns_per_tag = self._turns_per_tag()
        # Telegram cannot look a delivery up: a kill between its answer and the receipt
        # resends (the open window README's Telegram section describes): one message, one
        # turn, two posts. Two turns for one message would be the ledger failing: counted.
        duplicated = [tag for tag in twice if sent[tag] != "telegram" or turns_per_tag[tag] > 1]
        duplicated += [tag for tag in sent if turns_per_tag[tag] > 1 and tag not in twice]
        telegram_window = [tag for tag in twice if tag not in duplicated]
        lost = sorted(tag for tag in sent if counted[tag] == 0)
        given_up = self._db(
            lambda conn: conn.execute(
                select(func.count()).select_from(turns).where(turns.c.error.like("gave up%"))
            ).scalar_one()
        )
        fired, twice, missed = self._slots()
        recoveries, silent = self._kill_to_answer()
        recovery = _p(recoveries, 0.99)
        figures: dict[str, Any] = {
            "kills": len(self.kills),
            "kills_by_role": dict(collections.Counter(k.role.rstrip("01") for k in self.kills)),
            "postgres_restarts": self.postgres.restarts,
            "redis_restarts": self.redis.restarts,
            "messages": len(sent),
            "messages_by_platform": dict(collections.Counter(sent.values())),
            "replies": sum(counted[tag] for tag in sent),
            "duplicated_replies": len(duplicated),
            "telegram_resends_in_its_window": len(telegram_window),
            "lost_messages": len(lost),
            "side_effects": len(self.echo.requests),
            "duplicated_side_effects": self._side_effects(),
            "approvals": len(self.approved),
            "stuck_turns": stuck,
            "given_up": int(given_up),
            "slots_fired": fired,
            "slots_fired_twice": twice,
            "slots_missed": missed,
            "slots_due_while_redis_down": self.slots_in_outages["redis"],
            "slots_due_while_postgres_down": self.slots_in_outages["postgres"],
            "p99_kill_to_answer_seconds": None if recovery is None else round(recovery, 2),
            "kill_to_answer_measured": len(recoveries),
            "silent_after_a_kill": silent,
            "harness_errors": len(self.errors),
            "model_requests": len(self.model.requests),
            "discord_new_sessions": len(self.discord.identified),
            "discord_resumes": self.discord.resumed,
            "discord_sent_while_nobody_connected": self.discord.unheard,
            **self._memory(),
        }
        if self.errors:
            figures["harness_error_examples"] = self.errors[:3]
        if stuck:
            figures["stuck_detail"] = self.stuck_detail
        if duplicated or lost:
            figures["examples"] = {
                "duplicated": duplicated[:5],
                "lost": {
                    platform: [tag for tag in lost if sent[tag] == platform][:8]
                    for platform in sorted({sent[tag] for tag in lost})
                },
            }
        if lost:
            figures["lost_detail"] = self._db(lambda conn: _journal_of(conn, lost[:3]))
        return figures

    def _memory(self) -> dict[str, Any]:
        """RSS growth of the gateway that is never killed, per 1,000 turns it finished,
        after the first third of the run (warm-up)."""
        samples = self.rss
        if len(samples) < 6:
            return {"rss_mib": None, "rss_growth_mib_per_1000_turns": None}
        # Warm: past a third of the run and of the turns (litellm loads on the first call).
        total = samples[-1][2]
        warm = next((s for s in samples[len(samples) // 3 :] if s[2] >= total / 3), samples[-1])
        last = samples[-1]
        turns_done = last[2] - warm[2]
        growth = (last[1] - warm[1]) / 1024
        per_thousand = growth / turns_done * 1000 if turns_done > 0 else None
        return {
            "rss_mib": round(last[1] / 1024, 1),
            "rss_turns_measured": turns_done,
            "rss_growth_mib_per_1000_turns": None
            if per_thousand is None
            else round(per_thousand, 2),
        }


def _journal_of(conn: Connection, tags: list[str]) -> dict[str, Any]:
    """What the journal holds of the messages carrying ``tags`` (for finding out why a
    message got no reply): its turn, the turn's steps, and what the turn said."""
    found: dict[str, Any] = {}
    for tag in tags:
        rows = conn.execute(
            select(messages.c.text, messages.c.conversation_id, messages.c.turn_id).where(
                messages.c.role == "user", messages.c.text.like(f"%{tag}%")
            )
        ).all()
        found[tag] = [
            _turn_of(conn, row.conversation_id, row.turn_id)
            for row in rows
            if tag in _TAG.findall(row.text)
        ]
    return found


def _turn_of(conn: Connection, conversation_id: str, turn_id: int | None) -> dict[str, Any]:
    turn = conn.execute(
        select(turns.c.status, turns.c.lane, turns.c.attempts, turns.c.error).where(
            turns.c.id == turn_id
        )
    ).first()
    steps = conn.execute(
        select(turn_steps.c.seq, turn_steps.c.kind, turn_steps.c.status)
        .where(turn_steps.c.turn_id == turn_id)
        .order_by(turn_steps.c.seq)
    ).all()
    said = conn.execute(
        select(messages.c.role, messages.c.text, messages.c.platform_message_id)
        .where(messages.c.turn_id == turn_id, messages.c.role != "user")
        .order_by(messages.c.id)
    ).all()
    return {
        "conversation": conversation_id,
        "turn": turn_id,
        "turn_row": None if turn is None else [str(value) for value in turn],
        "steps": [[str(value) for value in step] for step in steps],
        "said": [[role, text[:80], receipt] for role, text, receipt in said],
    }


def _stuck_detail(conn: Connection) -> dict[str, Any]:
    """What is still open after the settle: turns by status and lane, and the first jobs
    with what their row says (for finding out why)."""
    now = time.time()
    open_turns = conn.execute(
        select(turns.c.status, turns.c.lane, func.count())
        .where(turns.c.status.in_(("pending", "running", "waiting")))
        .group_by(turns.c.status, turns.c.lane)
    ).all()
    open_jobs = conn.execute(
        select(
            jobs.c.id,
            jobs.c.kind,
            jobs.c.status,
            jobs.c.attempts,
            jobs.c.enqueued_at,
            jobs.c.lease_expires_at,
            jobs.c.not_before,
        )
        .where(jobs.c.status.in_(("queued", "running")))
        .order_by(jobs.c.id)
        .limit(8)
    ).all()

    def ago(at: datetime | None) -> float | None:
        return None if at is None else round(now - at.timestamp(), 1)

    return {
        "turns": {f"{status}/{lane}": int(n) for status, lane, n in open_turns},
        "jobs": [
            {
                "id": int(row.id),
                "kind": row.kind,
                "status": row.status,
                "attempts": int(row.attempts),
                "sent_ago": ago(row.enqueued_at),
                "lease_ended_ago": ago(row.lease_expires_at),
                "due_ago": ago(row.not_before),
            }
            for row in open_jobs
        ],
    }


def _tool(name: str, arguments: dict[str, Any]) -> Scripted:
    return Scripted(
        tool_calls=[
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ]
    )


def _rss_kb(pid: int) -> int | None:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


def _metric(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _p(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def table(figures: dict[str, Any]) -> str:
    """The figures as an aligned two-column table."""
    width = max(len(key) for key in figures)
    return "\n".join(f"{key.ljust(width)}  {value}" for key, value in figures.items())


def failures(figures: dict[str, Any]) -> list[str]:
    """The promised zeros that were not."""
    return [f"{name} = {figures[name]}" for name in ZEROS if figures.get(name)]

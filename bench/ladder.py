"""The Slack ladder: signed ``app_mention`` deliveries sent open-loop at fixed rates over 50
long-lived threads, to ``chatgate gateway`` (SQLite, then PostgreSQL) and to the
hand-written slack-bolt + litellm handler of ``bench/baseline_slack.py``, each against the
same kind of fake Slack and instant fake model, in the same run.

Open loop: the driver sends each mention at its appointed time whether or not earlier ones
were answered, as Slack does. Each step runs ``STEP_SECONDS`` at one rate; a rate is
*sustained* when the p99 from the webhook's send to the reply's ``chat.postMessage`` is
under 1 s, nothing is lost (every mention answered within ``GRACE_SECONDS`` after the
step), and at least 90 % of the rate was achieved (replies in the step's window). The
ladder climbs until two steps in a row are not sustained. Per server: the highest
sustained rate, CPU per mention and reply p50 / p99 at ``COMMON_RATE``, RSS after that
step, and seconds from spawn to ready. Chatgate runs with the workspace allowed by an
allow entry and the per-user limits raised (the driver writes far faster than a person).

The machine is shared and noisy: each server runs ``ROUNDS`` ladders, alternating, and the
figures are medians; the ratios matter more than the absolute numbers.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from bench.measure import cpu_and_peak, cpu_of_command, rss
from bench.scale import _admin
from bench.slack import baseline, wait_ready
from tests.fakes.gateway import GatewayProcess
from tests.fakes.model_server import FakeModelServer
from tests.fakes.slack_server import (
    BOT_USER,
    TEAM,
    FakeSlack,
    signed_headers,
)

RATES = (25, 50, 75, 100, 150, 200, 300, 400, 600)
COMMON_RATE = 50
STEP_SECONDS = 8.0
GRACE_SECONDS = 10.0
THREADS = 50
ROUNDS = 2
_ASKED = re.compile(r"question (\d+)")


@dataclass
class Step:
    """One rate's figures."""

    rate: int
    sent: int
    refused: int  # webhook deliveries answered other than 200, or not at all
    answered: int
    in_window: int
    p50: float
    p99: float
    cpu_per_mention: float
    rss: int
    # The database server's CPU per mention (all its processes), where it has one.
    server_cpu_per_mention: float | None = None

    @property
    def sustained(self) -> bool:
        return (
            self.answered == self.sent
            and self.refused == 0
            and self.p99 < 1.0
            and self.in_window >= 0.9 * self.rate * STEP_SECONDS
        )


@dataclass
class Ladder:
    """One server's climb."""

    ready_seconds: float
    steps: list[Step]

    @property
    def max_sustained(self) -> int:
        return max((s.rate for s in self.steps if s.sustained), default=0)

    def at(self, rate: int) -> Step | None:
        return next((s for s in self.steps if s.rate == rate), None)


def _mention(index: int) -> str:
    thread = index % THREADS
    root = f"1700000000.{thread:06d}"
    ts = f"{1700000001 + index}.000100"
    return json.dumps(
        {
            "team_id": TEAM,
            "api_app_id": "A0BENCH",
            "type": "event_callback",
            "event_id": f"EvLadder{index}",
            "event_time": int(time.time()),
            "event": {
                "type": "app_mention",
                "user": f"U0BENCH{thread:02d}",
                "text": f"<@{BOT_USER}> question {index}",
                "ts": ts,
                "thread_ts": root,
                "channel": "C0LADDER",
                "event_ts": ts,
            },
        }
    )


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("inf")


async def _step(
    session: aiohttp.ClientSession,
    url: str,
    slack: FakeSlack,
    pid: int,
    rate: int,
    first: int,
    *,
    server: str | None = None,
) -> Step:
    count = int(rate * STEP_SECONDS)
    bodies = [_mention(first + i) for i in range(count)]
    sent_at: dict[int, float] = {}
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.2
    cpu_before, _ = cpu_and_peak(pid)
    server_before = cpu_of_command(server) if server else 0.0
    refused = 0

    async def one(i: int) -> None:
        nonlocal refused
        await asyncio.sleep(max(0.0, start + i / rate - loop.time()))
        body = bodies[i]
        headers = {"Content-Type": "application/json", **signed_headers(body)}
        sent_at[first + i] = time.monotonic()
        try:
            async with session.post(url, data=body.encode(), headers=headers) as response:
                await response.read()
                if response.status != 200:
                    refused += 1
        except aiohttp.ClientError:
            refused += 1

    await asyncio.gather(*(one(i) for i in range(count)))
    deadline = time.monotonic() + GRACE_SECONDS
    replies: dict[int, float] = {}
    while time.monotonic() < deadline:
        replies = _replies(slack, first, count)
        if len(replies) >= count:
            break
        await asyncio.sleep(0.05)
    cpu_after, _ = cpu_and_peak(pid)
    server_after = cpu_of_command(server) if server else 0.0
    latencies = [at - sent_at[i] for i, at in replies.items() if i in sent_at]
    window_end = start + STEP_SECONDS + 1.0  # loop.time() is time.monotonic()
    return Step(
        rate=rate,
        sent=count,
        refused=refused,
        answered=len(replies),
        in_window=sum(1 for at in replies.values() if at <= window_end),
        p50=_percentile(latencies, 0.5),
        p99=_percentile(latencies, 0.99),
        cpu_per_mention=(cpu_after - cpu_before) / count,
        rss=rss(pid),
        server_cpu_per_mention=(server_after - server_before) / count if server else None,
    )


def _replies(slack: FakeSlack, first: int, count: int) -> dict[int, float]:
    found: dict[int, float] = {}
    for at, text in list(slack.arrivals):
        match = _ASKED.search(text)
        if match and first <= int(match.group(1)) < first + count:
            found.setdefault(int(match.group(1)), at)
    return found


async def _climb(url: str, slack: FakeSlack, pid: int, *, server: str | None = None) -> list[Step]:
    steps: list[Step] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        first = 0
        await _step(session, url, slack, pid, 5, 10_000_000)  # warm up: 40 mentions
        misses = 0
        for rate in RATES:
            step = await _step(session, url, slack, pid, rate, first, server=server)
            first += step.sent
            steps.append(step)
            misses = 0 if step.sustained else misses + 1
            if misses == 2:
                break
            await asyncio.sleep(1.0)
    return steps


@contextmanager
def _chatgate(
    model: FakeModelServer, slack: FakeSlack, database_url: str, workdir: Path
) -> Iterator[tuple[str, int, float]]:
    gateway = GatewayProcess(
        database_url=database_url,
        workdir=workdir,
        CHATGATE_MODEL="openai/gpt-4o-mini",
        CHATGATE_MODEL_API_BASE=model.base_url,
        CHATGATE_MODEL_API_KEY="sk-bench",
        CHATGATE_LOG_LEVEL="info",
        CHATGATE_LEASE_SECONDS="30",
        CHATGATE_ALLOW=f"slack:{TEAM}:*",
        CHATGATE_RATE_BURST="100000",
        CHATGATE_RATE_PER_MINUTE="1000000",
        CHATGATE_MAX_CONCURRENT_TURNS="64",
        **slack.settings(),
    )
    gateway.fork = False
    started = time.monotonic()
    gateway.launch()
    try:
        ready = wait_ready(gateway.url, started)
        assert gateway.pid is not None
        yield f"{gateway.url}/slack/events", gateway.pid, ready
    finally:
        gateway.terminate()


def _ladder(server: str, postgres: str) -> Ladder:
    with FakeModelServer() as model, FakeSlack() as slack:
        if server == "baseline":
            with baseline(model, slack) as (url, pid, ready):
                return Ladder(ready, asyncio.run(_climb(url, slack, pid)))
        with tempfile.TemporaryDirectory() as workdir:
            if server == "sqlite":
                database = f"sqlite+aiosqlite:///{workdir}/bench.db"
                with _chatgate(model, slack, database, Path(workdir)) as (url, pid, ready):
                    return Ladder(ready, asyncio.run(_climb(url, slack, pid)))
            name = f"chatgate_ladder_{uuid.uuid4().hex[:8]}"
            asyncio.run(_admin(postgres, f'CREATE DATABASE "{name}"'))
            try:
                database = postgres.rsplit("/", 1)[0] + f"/{name}"
                with _chatgate(model, slack, database, Path(workdir)) as (url, pid, ready):
                    steps = asyncio.run(_climb(url, slack, pid, server="postgres"))
                    return Ladder(ready, steps)
            finally:
                asyncio.run(_admin(postgres, f'DROP DATABASE "{name}" WITH (FORCE)'))


def _summary(ladders: list[Ladder]) -> dict[str, Any]:
    common = [s for s in (ladder.at(COMMON_RATE) for ladder in ladders) if s is not None]
    return {
        "max": statistics.median(ladder.max_sustained for ladder in ladders),
        "maxes": [ladder.max_sustained for ladder in ladders],
        "cpu": statistics.median(s.cpu_per_mention for s in common) if common else float("nan"),
        "p50": statistics.median(s.p50 for s in common) if common else float("nan"),
        "p99": statistics.median(s.p99 for s in common) if common else float("nan"),
        "rss": statistics.median(s.rss for s in common) if common else 0,
        "ready": statistics.median(ladder.ready_seconds for ladder in ladders),
        "server": statistics.median(
            s.server_cpu_per_mention for s in common if s.server_cpu_per_mention is not None
        )
        if any(s.server_cpu_per_mention is not None for s in common)
        else None,
    }


def _steps_line(name: str, ladder: Ladder) -> str:
    marks = " ".join(
        f"{s.rate}{'' if s.sustained else '!'}({s.p99 * 1000:.0f}ms,{s.answered}/{s.sent})"
        for s in ladder.steps
    )
    return f"  {name:9} {marks}"


def bench_ladder(postgres: str, *, rounds: int = ROUNDS) -> None:
    """Print each server's ladder and the ratios against the baseline."""
    servers = ("baseline", "sqlite", "postgres")
    results: dict[str, list[Ladder]] = {name: [] for name in servers}
    for _ in range(rounds):
        for name in servers:
            ladder = _ladder(name, postgres)
            results[name].append(ladder)
            print(_steps_line(name, ladder), flush=True)
    base = _summary(results["baseline"])
    print(
        f"slack ladder ({THREADS} threads, {STEP_SECONDS:.0f} s steps, median of {rounds}; "
        f"'!' = not sustained)"
    )
    print(
        f"  {'':9} {'max rate':>12} {'CPU/mention':>12} {'p50':>9} {'p99':>9} "
        f"{'RSS':>9} {'ready':>7}"
    )
    for name in servers:
        figures = _summary(results[name])
        print(
            f"  {name:9} {figures['max']:>5.0f}/s {figures['maxes']!s:>6}"
            f" {figures['cpu'] * 1000:>9.2f} ms {figures['p50'] * 1000:>6.1f} ms"
            f" {figures['p99'] * 1000:>6.1f} ms {figures['rss'] / 2**20:>5.0f} MiB"
            f" {figures['ready']:>5.2f} s"
        )
        if name == "baseline":
            continue
        print(
            f"  {'ratio':9} {figures['max'] / base['max']:>11.2f}x"
            f" {figures['cpu'] / base['cpu']:>11.2f}x {figures['p50'] / base['p50']:>8.2f}x"
            f" {figures['p99'] / base['p99']:>8.2f}x {figures['rss'] / base['rss']:>8.2f}x"
            f" {figures['ready'] / base['ready']:>6.2f}x"
        )
        if figures["server"] is not None:
            server, own = figures["server"], figures["cpu"]
            print(
                f"  {'':9} + the database server's CPU {server * 1000:.2f} ms a mention:"
                f" {(own + server) * 1000:.2f} ms in all ({(own + server) / base['cpu']:.2f}x)"
            )


if __name__ == "__main__":
    from bench.__main__ import POSTGRES

    bench_ladder(sys.argv[1] if len(sys.argv) > 1 else POSTGRES)

"""The Slack bar: a mention answered end to end (signed Events API request in, model call,
``chat.postMessage`` out) by ``chatgate gateway`` vs the hand-written slack-bolt + litellm
handler of ``bench/baseline_slack.py``, both against the same fake Slack and fake model.
CPU seconds and peak memory of the serving process per mention, median of three runs."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from bench.measure import cpu_and_peak
from tests.fakes.gateway import GatewayProcess, child_env, free_port, http
from tests.fakes.model_server import FakeModelServer
from tests.fakes.slack_server import (
    BOT_USER,
    SIGNING_SECRET,
    TEAM,
    TOKEN,
    FakeSlack,
    signed_headers,
)

MENTIONS = 200
CHANNELS = 20
CLIENTS = 10


def _mention(index: int) -> str:
    ts = f"1700{index:06d}.000100"
    return json.dumps(
        {
            "team_id": TEAM,
            "api_app_id": "A0BENCH",
            "type": "event_callback",
            "event_id": f"EvBench{index}",
            "event_time": int(time.time()),
            "event": {
                "type": "app_mention",
                "user": "U0BENCH",
                "text": f"<@{BOT_USER}> question {index}",
                "ts": ts,
                "channel": f"C{index % CHANNELS:04d}",
                "event_ts": ts,
            },
        }
    )


def _drive(url: str, slack: FakeSlack, first: int) -> None:
    def post(index: int) -> None:
        body = _mention(first + index)
        headers = {"Content-Type": "application/json", **signed_headers(body)}
        status, _ = http("POST", url, raw=body.encode(), headers=headers, timeout=30)
        assert status == 200, status

    before = len(slack.posted())
    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(post, range(MENTIONS)))
    slack.wait_for("chat.postMessage", before + MENTIONS, timeout=300)


def _measure(pid: int, url: str, slack: FakeSlack, server: FakeModelServer) -> tuple[float, int]:
    _drive_one(url, slack)  # warm up: imports, first connections
    server.wait_for_requests(1, timeout=60)
    time.sleep(1)
    cpu_before, _ = cpu_and_peak(pid)
    _drive(url, slack, first=1000)
    cpu_after, peak = cpu_and_peak(pid)
    return cpu_after - cpu_before, peak


def _drive_one(url: str, slack: FakeSlack) -> None:
    body = _mention(999_999)
    headers = {"Content-Type": "application/json", **signed_headers(body)}
    assert http("POST", url, raw=body.encode(), headers=headers, timeout=60)[0] == 200
    slack.wait_for("chat.postMessage", 1, timeout=60)


def _chatgate(server: FakeModelServer, slack: FakeSlack, workdir: Path) -> tuple[float, int]:
    gateway = GatewayProcess(
        database_url=f"sqlite+aiosqlite:///{workdir / 'bench.db'}",
        workdir=workdir,
        CHATGATE_MODEL="openai/gpt-4o-mini",
        CHATGATE_MODEL_API_BASE=server.base_url,
        CHATGATE_MODEL_API_KEY="sk-bench",
        CHATGATE_LOG_LEVEL="warning",
        CHATGATE_LEASE_SECONDS="30",
        CHATGATE_ACCESS="open",
        CHATGATE_RATE_BURST="100000",
        CHATGATE_RATE_PER_MINUTE="100000",
        # One post per mention, like the handler (streaming has its own bench; a first
        # reply slowed by litellm's import would otherwise stream).
        CHATGATE_STREAM_REPLIES="false",
        **slack.settings(),
    )
    gateway.start()
    try:
        assert gateway.pid is not None
        return _measure(gateway.pid, f"{gateway.url}/slack/events", slack, server)
    finally:
        gateway.terminate()


def wait_ready(url: str, started: float) -> float:
    """Seconds from ``started`` until ``url``'s /readyz answers 200 (at most 60)."""
    while True:
        try:
            if http("GET", f"{url}/readyz", timeout=1)[0] == 200:
                return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.01)
        if time.monotonic() - started > 60:
            raise AssertionError(f"{url} not ready in 60 s")


@contextmanager
def baseline(model: FakeModelServer, slack: FakeSlack) -> Iterator[tuple[str, int, float]]:
    """The baseline handler running: (its events URL, its pid, seconds until ready)."""
    port = free_port()
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.baseline_slack", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=child_env(
            BENCH_MODEL="openai/gpt-4o-mini",
            BENCH_API_BASE=model.base_url,
            BENCH_SLACK_TOKEN=TOKEN,
            BENCH_SLACK_SECRET=SIGNING_SECRET,
            BENCH_SLACK_API=slack.api_url,
        ),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        ready = wait_ready(url, started)
        yield f"{url}/slack/events", process.pid, ready
    finally:
        process.terminate()
        process.wait(30)


def _baseline(server: FakeModelServer, slack: FakeSlack) -> tuple[float, int]:
    with baseline(server, slack) as (url, pid, _ready):
        return _measure(pid, url, slack, server)


def _run(make: Callable[[FakeModelServer, FakeSlack], tuple[float, int]]) -> tuple[float, int]:
    with FakeModelServer() as server, FakeSlack() as slack:
        return make(server, slack)


def bench_slack() -> None:
    """Print CPU and peak RSS per mention, chatgate vs the baseline."""
    ours: list[tuple[float, int]] = []
    base: list[tuple[float, int]] = []
    for _ in range(3):
        base.append(_run(_baseline))
        with tempfile.TemporaryDirectory() as workdir:
            ours.append(_run(lambda s, k, w=Path(workdir): _chatgate(s, k, w)))
    cpu = statistics.median(c for c, _ in ours) / MENTIONS
    cpu_base = statistics.median(c for c, _ in base) / MENTIONS
    peak = statistics.median(p for _, p in ours)
    peak_base = statistics.median(p for _, p in base)
    verdict = "ok" if cpu < cpu_base and peak < peak_base else "OVER the baseline"
    print(
        f"slack mention CPU   {cpu * 1000:7.2f} ms/msg   baseline {cpu_base * 1000:6.2f} ms/msg"
        f"   ratio {cpu / cpu_base:5.2f}x"
    )
    print(
        f"slack mention RSS   {peak / 2**20:7.1f} MiB      baseline {peak_base / 2**20:6.1f} MiB"
        f"      ratio {peak / peak_base:5.2f}x   [{verdict}]"
    )

"""``make bench``: chatgate's costs as ratios against baselines run side by side.

1. ``chatgate --help`` wall time vs ``python -c pass`` (bar: under 0.5 s).
2. ``chatgate run`` from spawn to /readyz 200 (bar: under 3 s).
3. One web chat turn end to end (ledger, journal, reply) vs a hand-written aiohttp +
   litellm handler without durability, both against the same fake model server: CPU
   seconds and peak memory of the serving process per message.
4. The Slack bar (``bench/slack.py``): a mention answered end to end vs a hand-written
   slack-bolt + litellm handler, CPU and peak memory per mention.
   And the Slack ladder (``bench/ladder.py``): open-loop mentions at rising rates over 50
   threads, chatgate on SQLite and PostgreSQL vs that handler: max sustained rate, CPU
   per mention, reply p50 / p99, RSS, ready after start, and the ratios.
   And streaming (``bench/streaming.py``): a 2,000-character Slack reply shown as it is
   written vs posted whole, CPU per reply.
5. The queued path (``bench/queued.py``): dispatcher tick time with 100,000 schedules vs
   1,000, and chat reply latency with 2,000 background jobs queued vs none. And a burst
   (``bench/schedule_burst.py``): 10,000 schedules due in one minute, dispatched by one
   tick (and by two dispatchers at once), beside the figure measured before #28; and the
   lag (``bench/schedule_lag.py``): how late 1,000 runs due at once start with 2 workers.
6. Context assembly (``bench/context.py``): packing a 5,000-message history into the
   window vs reading it from the database.
7. Scale-out (``bench/scale.py``): messages answered per second by 2 gateways vs 1 on
   PostgreSQL.
8. The sandbox (``bench/sandbox.py``): one ``run_command`` through bwrap vs through the
   unconfined subprocess (bar: under 50 ms).
9. The operator console (``bench/console.py``): each page's answer time over 100,000 turns
   vs 1,000, on SQLite and PostgreSQL (bar: under a second).

The machine is shared and noisy: each figure is a median of several runs, and the ratios
matter more than the absolute numbers.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.console import bench_console
from bench.context import bench_context
from bench.ladder import bench_ladder
from bench.measure import cpu_and_peak
from bench.queued import bench_dispatcher, bench_isolation
from bench.sandbox import bench_sandbox
from bench.scale import bench_scale
from bench.schedule_burst import bench_schedule_burst
from bench.schedule_lag import bench_schedule_lag
from bench.slack import bench_slack
from bench.streaming import bench_streaming
from tests.fakes.gateway import CHATGATE, GatewayProcess, child_env, free_port, http
from tests.fakes.model_server import FakeModelServer

POSTGRES = "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
MESSAGES = 200
CONVERSATIONS = 20
CLIENTS = 10


def _median_seconds(run: Callable[[], None], times: int) -> float:
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        run()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def bench_help() -> None:
    def chatgate_help() -> None:
        subprocess.run([str(CHATGATE), "--help"], check=True, capture_output=True)

    def python_pass() -> None:
        subprocess.run([sys.executable, "-c", "pass"], check=True, capture_output=True)

    ours, base = _median_seconds(chatgate_help, 10), _median_seconds(python_pass, 10)
    verdict = "ok" if ours < 0.5 else "OVER 0.5 s"
    print(
        f"chatgate --help     {ours * 1000:7.0f} ms   python -c pass {base * 1000:5.0f} ms"
        f"   ratio {ours / base:5.1f}x   [{verdict}]"
    )


def bench_ready() -> None:
    samples = []
    for _ in range(5):
        with tempfile.TemporaryDirectory() as workdir:
            port = free_port()
            started = time.perf_counter()
            process = subprocess.Popen(
                [str(CHATGATE), "run"],
                cwd=workdir,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=child_env(CHATGATE_PORT=str(port)),
            )
            try:
                while True:
                    try:
                        if http("GET", f"http://127.0.0.1:{port}/readyz", timeout=1)[0] == 200:
                            break
                    except OSError:
                        time.sleep(0.01)
                samples.append(time.perf_counter() - started)
            finally:
                process.terminate()
                process.wait(30)
    ready = statistics.median(samples)
    verdict = "ok" if ready < 3 else "OVER 3 s"
    print(f"chatgate run ready  {ready * 1000:7.0f} ms   (median of 5, fresh SQLite)   [{verdict}]")


def _drive(post: Callable[[int], None]) -> None:
    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(post, range(MESSAGES)))


def _run_chatgate(server: FakeModelServer, workdir: Path) -> tuple[float, int]:
    gateway = GatewayProcess(
        database_url=f"sqlite+aiosqlite:///{workdir / 'bench.db'}",
        workdir=workdir,
        CHATGATE_MODEL="openai/gpt-4o-mini",
        CHATGATE_MODEL_API_BASE=server.base_url,
        CHATGATE_MODEL_API_KEY="sk-bench",
        CHATGATE_LOG_LEVEL="warning",
        CHATGATE_LEASE_SECONDS="30",
    )
    gateway.start()
    try:
        gateway.post("warm-up", "hello")
        server.wait_for_requests(1, timeout=60)
        time.sleep(1)
        assert gateway.process is not None
        pid = gateway.process.pid
        cpu_before, _ = cpu_and_peak(pid)
        start = len(server.requests)
        conversation_ids: dict[int, str] = {}

        def post(index: int) -> None:
            body = gateway.post(f"c{index % CONVERSATIONS}", f"message {index}")
            conversation_ids[index % CONVERSATIONS] = body["conversation_id"]

        _drive(post)
        server.wait_for_requests(start + MESSAGES, timeout=300)
        for conversation_id in conversation_ids.values():
            gateway.wait_for_replies(conversation_id, MESSAGES // CONVERSATIONS, timeout=120)
        cpu_after, peak = cpu_and_peak(pid)
        return cpu_after - cpu_before, peak
    finally:
        gateway.terminate()


def _run_baseline(server: FakeModelServer) -> tuple[float, int]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.baseline_web", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=child_env(BENCH_MODEL="openai/gpt-4o-mini", BENCH_API_BASE=server.base_url),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                if http("GET", f"{url}/readyz", timeout=1)[0] == 200:
                    break
            except OSError:
                time.sleep(0.05)
        http(
            "POST", f"{url}/api/messages", {"conversation": "warm-up", "text": "hello"}, timeout=60
        )
        time.sleep(1)
        cpu_before, _ = cpu_and_peak(process.pid)

        def post(index: int) -> None:
            status, _ = http(
                "POST",
                f"{url}/api/messages",
                {"conversation": f"c{index % CONVERSATIONS}", "text": f"message {index}"},
                timeout=60,
            )
            assert status == 200

        _drive(post)
        cpu_after, peak = cpu_and_peak(process.pid)
        return cpu_after - cpu_before, peak
    finally:
        process.terminate()
        process.wait(30)


def bench_turns() -> None:
    ours: list[tuple[float, int]] = []
    base: list[tuple[float, int]] = []
    for _ in range(3):
        with FakeModelServer() as server:
            base.append(_run_baseline(server))
        with FakeModelServer() as server, tempfile.TemporaryDirectory() as workdir:
            ours.append(_run_chatgate(server, Path(workdir)))
    cpu = statistics.median(c for c, _ in ours) / MESSAGES
    cpu_base = statistics.median(c for c, _ in base) / MESSAGES
    peak = statistics.median(p for _, p in ours)
    peak_base = statistics.median(p for _, p in base)
    print(
        f"web turn CPU        {cpu * 1000:7.2f} ms/msg   baseline {cpu_base * 1000:6.2f} ms/msg"
        f"   ratio {cpu / cpu_base:5.2f}x"
    )
    print(
        f"web turn peak RSS   {peak / 2**20:7.1f} MiB      baseline {peak_base / 2**20:6.1f} MiB"
        f"      ratio {peak / peak_base:5.2f}x"
    )


def main() -> None:
    print(
        f"chatgate benchmarks ({MESSAGES} messages, {CONVERSATIONS} conversations, "
        f"{CLIENTS} clients)"
    )
    bench_help()
    bench_ready()
    bench_turns()
    bench_slack()
    bench_streaming()
    bench_ladder(os.environ.get("CHATGATE_BENCH_POSTGRES_URL", POSTGRES))
    bench_dispatcher(os.environ.get("CHATGATE_BENCH_POSTGRES_URL", POSTGRES))
    bench_schedule_burst(os.environ.get("CHATGATE_BENCH_POSTGRES_URL", POSTGRES))
    bench_schedule_lag(os.environ.get("CHATGATE_BENCH_POSTGRES_URL", POSTGRES))
    bench_isolation()
    bench_context()
    bench_scale(os.environ.get("CHATGATE_BENCH_POSTGRES_URL", POSTGRES))
    bench_sandbox()
    bench_console(os.environ.get("CHATGATE_BENCH_POSTGRES_URL", POSTGRES))


if __name__ == "__main__":
    main()

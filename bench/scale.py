"""Throughput of 2 gateways vs 1 on PostgreSQL: messages answered per second.

Each run starts the gateways fresh on a new database, sends ``MESSAGES`` web chat
messages over ``CONVERSATIONS`` conversations from ``CLIENTS`` threads, spread evenly over
the gateways (what a load balancer does), and times until every one is answered (counted in
the database, so the gateways are not also busy answering polls). The fake model answers
at once, so the gateways' own work is what is measured. On 2 shared cores, with PostgreSQL
and the fake model on the same cores, expect well under 2x: the point is that a second
gateway adds throughput and nothing breaks.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from agent_core.storage.database import Database
from agent_core.storage.schema import messages
from tests.fakes.gateway import GatewayProcess
from tests.fakes.model_server import FakeModelServer

MESSAGES = 400
CONVERSATIONS = 40
CLIENTS = 16
RUNS = 2


async def _admin(url: str, statement: str) -> None:
    import asyncpg

    admin = make_url(url).set(drivername="postgresql")
    conn = await asyncpg.connect(admin.render_as_string(hide_password=False))
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def _answered(database: Database) -> int:
    query = select(func.count()).select_from(messages).where(messages.c.role == "assistant")
    return int(await database.read(lambda conn: conn.execute(query).scalar_one()))


async def _until_answered(database: Database, count: int) -> None:
    # Polling the database is the point: the answers are written by other processes.
    while await _answered(database) < count:  # noqa: ASYNC110
        await asyncio.sleep(0.05)


async def _one_run(postgres: str, gateways: int, workdir: Path) -> float:
    name = f"chatgate_bench_{uuid.uuid4().hex[:8]}"
    await _admin(postgres, f'CREATE DATABASE "{name}"')
    url = make_url(postgres).set(database=name).render_as_string(hide_password=False)
    database = Database(url)
    await database.migrate()
    started_processes: list[GatewayProcess] = []
    try:
        with FakeModelServer() as server:
            for index in range(gateways):
                directory = workdir / f"g{gateways}-{index}"
                directory.mkdir()
                gateway = GatewayProcess(
                    database_url=url,
                    workdir=directory,
                    CHATGATE_LOG_LEVEL="warning",
                    CHATGATE_LEASE_SECONDS="30",
                    **server.settings(),
                )
                gateway.start()
                started_processes.append(gateway)
            for gateway in started_processes:  # warm: litellm loaded, connections open
                gateway.post(f"warm-{gateway.port}", "hello")
            await _until_answered(database, gateways)
            before = await _answered(database)

            def post(index: int) -> None:
                gateway = started_processes[index % gateways]
                gateway.post(f"c{index % CONVERSATIONS}", f"message {index}", id=f"m{index}")

            loop = asyncio.get_running_loop()
            began = time.perf_counter()
            with ThreadPoolExecutor(CLIENTS) as pool:
                await asyncio.gather(
                    *(loop.run_in_executor(pool, post, i) for i in range(MESSAGES))
                )
            await _until_answered(database, before + MESSAGES)
            return MESSAGES / (time.perf_counter() - began)
    finally:
        for gateway in started_processes:
            gateway.terminate()
        await database.dispose()
        await _admin(postgres, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def bench_scale(postgres: str) -> None:
    """Print messages per second with 1 and 2 gateways (median of ``RUNS``), and the ratio."""
    rates: dict[int, list[float]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as workdir:
        for run in range(RUNS):
            for gateways in (1, 2):
                path = Path(workdir) / f"run{run}"
                path.mkdir(exist_ok=True)
                rates[gateways].append(asyncio.run(_one_run(postgres, gateways, path)))
    one, two = statistics.median(rates[1]), statistics.median(rates[2])
    print(
        f"2 gateways vs 1     {two:7.1f} msg/s   1 gateway {one:6.1f} msg/s"
        f"        ratio {two / one:5.2f}x   (PostgreSQL, {MESSAGES} messages, 2 cores)"
    )


if __name__ == "__main__":
    bench_scale("postgresql+asyncpg://postgres@127.0.0.1:5432/postgres")

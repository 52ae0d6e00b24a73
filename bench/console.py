"""The operator console over a large journal: each page's answer time through a running
gateway with 100,000 turns (1,000 conversations, 200,000 messages, 200,000 journal steps,
100,000 model calls) vs 1,000 turns, on SQLite and PostgreSQL.

Bar: every page under a second here. The ratio says what grows with the history: a page
served from an index stays near 1x; a search reads every message, so it grows with them.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from sqlalchemy import insert, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import SQLAlchemyError

from agent_core.events import utcnow
from agent_core.storage.database import Database
from agent_core.storage.schema import (
    audit_log,
    conversations,
    messages,
    model_usage,
    turn_steps,
    turns,
)
from tests.fakes.gateway import GatewayProcess, http

POSTGRES = "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
LARGE = 100_000
SMALL = 1_000
PER_CONVERSATION = 100
SAMPLES = 7
_TOKEN = "bench-console-token-0123456789"
_WORDS = ("deploy", "invoice", "backup", "report", "schedule", "rollback", "pelican", "quota")


def _seed(conn: Connection, first: int, count: int, now_minutes: int) -> None:
    """Turns ``first`` to ``first + count`` (ids), each with a question, an answer, a model
    call and a tool call, in conversations of ``PER_CONVERSATION`` turns."""
    now = utcnow()
    rows_c, rows_t, rows_m, rows_s, rows_u, rows_a = [], [], [], [], [], []
    for index in range(first, first + count):
        conversation = f"c{index // PER_CONVERSATION:031d}"
        at = now - timedelta(minutes=now_minutes - index // 10)
        if index % PER_CONVERSATION == 0:
            rows_c.append(
                {
                    "id": conversation,
                    "platform": ("slack", "telegram", "discord", "web")[index % 4],
                    "workspace": "T1",
                    "channel": f"C{index // PER_CONVERSATION}",
                    "thread": "",
                    "created_at": at,
                    "updated_at": at + timedelta(minutes=PER_CONVERSATION),
                }
            )
        word = _WORDS[index % len(_WORDS)]
        user = f"slack:U{index % 50}"
        rows_t.append(
            {
                "id": index + 1,
                "conversation_id": conversation,
                "user_id": user,
                "status": "done",
                "attempts": 1,
                "stalls": 0,
                "created_at": at,
                "started_at": at,
                "finished_at": at + timedelta(seconds=2),
                "lane": "inline",
            }
        )
        rows_m += [
            {
                "conversation_id": conversation,
                "role": "user",
                "text": f"please {word} the thing number {index} for the team",
                "author": user,
                "turn_id": index + 1,
                "delivery_key": None,
                "platform_message_id": None,
                "created_at": at,
            },
            {
                "conversation_id": conversation,
                "role": "assistant",
                "text": f"Done: {word} {index} finished without trouble.",
                "author": None,
                "turn_id": index + 1,
                "delivery_key": f"bench:{index}",
                "platform_message_id": f"{index}.000100",
                "created_at": at + timedelta(seconds=2),
            },
        ]
        output = {
            "model": "bench-model",
            "prompt_tokens": 400,
            "completion_tokens": 40,
            "cost_usd": 0.0003,
            "context_tokens": {"system": 100, "history": 300},
        }
        rows_s += [
            {
                "turn_id": index + 1,
                "seq": 1,
                "kind": "model_call",
                "status": "done",
                "input": {"model": "bench-model"},
                "output": output,
                "idempotency_key": f"{index + 1}:1",
                "started_at": at,
                "finished_at": at + timedelta(seconds=1),
            },
            {
                "turn_id": index + 1,
                "seq": 3,
                "kind": "tool_call",
                "status": "done",
                "input": {"name": "http_request", "arguments": {"url": f"https://x/{index}"}},
                "output": {"status": "ok", "content": "HTTP 200 OK"},
                "idempotency_key": f"{index + 1}:3",
                "started_at": at + timedelta(seconds=1),
                "finished_at": at + timedelta(seconds=1.5),
            },
        ]
        rows_a.append(
            {
                "at": at + timedelta(seconds=1.5),
                "actor": user,
                "action": "tool.call",
                "subject": "http_request",
                "conversation_id": conversation,
                "turn_id": index + 1,
                "detail": {"seq": 3, "status": "ok"},
            }
        )
        rows_u.append(
            {
                "day": at.strftime("%Y-%m-%d"),
                "user_id": user,
                "conversation_id": conversation,
                "turn_id": index + 1,
                "model": "bench-model",
                "prompt_tokens": 400,
                "completion_tokens": 40,
                "cost_usd": 0.0003,
                "created_at": at,
            }
        )
    for table, rows in (
        (conversations, rows_c),
        (turns, rows_t),
        (messages, rows_m),
        (turn_steps, rows_s),
        (model_usage, rows_u),
        (audit_log, rows_a),
    ):
        if rows:
            conn.execute(insert(table), rows)


async def _prepare(url: str, total: int) -> None:
    database = Database(url)
    try:
        await database.migrate()
        minutes = total // 10 + 10
        for first in range(0, total, 5_000):
            await database.write(_seed, first, min(5_000, total - first), minutes)
        if database.dialect == "postgresql":
            await database.write(lambda conn: conn.execute(text("ANALYZE")))
    finally:
        await database.dispose()


def _pages(total: int) -> dict[str, str]:
    middle = total // 2
    return {
        "turns": "/api/console/turns?limit=50",
        "turns, deep page": f"/api/console/turns?limit=50&before={middle}",
        "one person's turns": "/api/console/turns?limit=50&user=slack:U7",
        "conversations": "/api/console/conversations?limit=50",
        "search": "/api/console/conversations?limit=50&q=pelican",
        "a turn's timeline": f"/api/console/turns/{middle}",
        "usage by day": "/api/console/usage?by=day&days=3660",
        "usage by person": "/api/console/usage?by=user&days=3660",
        "people": "/api/console/people",
        "approvals": "/api/console/approvals?state=decided",
        "audit log": "/api/console/audit",
        "audit search": "/api/console/audit?q=U7",
    }


def _time_pages(url: str, total: int, workdir: Path) -> dict[str, float]:
    # The seeded conversations are Slack's: the console answers only the token's holder.
    gateway = GatewayProcess(database_url=url, workdir=workdir, CHATGATE_WEB_TOKEN=_TOKEN)
    gateway.start()
    try:
        seconds: dict[str, float] = {}
        for name, path in _pages(total).items():
            samples = []
            for _ in range(SAMPLES):
                started = time.perf_counter()
                status, _body = http(
                    "GET", gateway.url + path, headers={"Authorization": f"Bearer {_TOKEN}"},
                    timeout=60,
                )  # fmt: skip
                samples.append(time.perf_counter() - started)
                assert status == 200, (path, status)
            seconds[name] = statistics.median(samples)
        return seconds
    finally:
        gateway.stop()


def _measure(backend: str, make_url_for: Callable[[str], str]) -> None:
    with tempfile.TemporaryDirectory() as workdir:
        figures = {}
        for total in (SMALL, LARGE):
            url = make_url_for(f"console_{total}")
            asyncio.run(_prepare(url, total))
            figures[total] = _time_pages(url, total, Path(workdir))
    worst = max(figures[LARGE].values())
    verdict = "ok" if worst < 1.0 else "OVER 1 s"
    print(f"console pages       {backend:10} 100,000 turns vs 1,000   [{verdict}]")
    for name, large in figures[LARGE].items():
        small = figures[SMALL][name]
        print(
            f"  {name:22} {large * 1000:7.1f} ms   (1,000 turns {small * 1000:6.1f} ms)"
            f"   ratio {large / small:5.2f}x"
        )


def bench_console(postgres_url: str | None = None) -> None:
    """Console pages over 100,000 turns vs 1,000 (SQLite, and PostgreSQL when given)."""
    with tempfile.TemporaryDirectory() as folder:
        _measure("sqlite", lambda name: f"sqlite+aiosqlite:///{Path(folder) / name}.db")
    if not postgres_url:
        return
    made: list[str] = []

    def pg(name: str) -> str:
        database = f"chatgate_bench_{name}_{uuid.uuid4().hex[:6]}"
        asyncio.run(_admin(postgres_url, f'CREATE DATABASE "{database}"'))
        made.append(database)
        return make_url(postgres_url).set(database=database).render_as_string(hide_password=False)

    try:
        _measure("postgresql", pg)
    except (OSError, SQLAlchemyError) as exc:
        print(f"console pages       postgresql skipped: {str(exc).splitlines()[0]}")
    finally:
        for database in made:
            asyncio.run(_admin(postgres_url, f'DROP DATABASE IF EXISTS "{database}"'))


async def _admin(url: str, statement: str) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(statement))
    finally:
        await engine.dispose()


if __name__ == "__main__":
    import os

    bench_console(os.environ.get("CHATGATE_BENCH_POSTGRES_URL", POSTGRES))

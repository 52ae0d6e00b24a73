"""Shared fixtures: the network guard, a database per test, the fake model server.

``CHATGATE_TEST_DATABASE`` picks the backend: ``sqlite`` (default) or ``postgresql``
(``CHATGATE_TEST_POSTGRES_URL``, default the local server as user postgres). On
PostgreSQL each test gets a fresh database copied from a migrated template.

The PostgreSQL pass runs what depends on the database: tests that take no database run
the same in both passes, and those marked ``any_database`` (platform adapters, tracing,
MCP: their subject is not the storage) are left to the SQLite pass.
``CHATGATE_TEST_EVERYTHING=1`` runs them all on PostgreSQL too.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from agent_core.storage.database import Database
from tests.fakes import gateway as gateway_fakes
from tests.fakes import netguard
from tests.fakes.forkserver import start_server
from tests.fakes.gateway import child_env
from tests.fakes.model_server import FakeModelServer

BACKEND = os.environ.get("CHATGATE_TEST_DATABASE", "sqlite")
REDIS = "redis://127.0.0.1:6379"
POSTGRES = os.environ.get(
    "CHATGATE_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
)
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On PostgreSQL, leave to the SQLite pass what does not depend on the database."""
    if BACKEND != "postgresql" or os.environ.get("CHATGATE_TEST_EVERYTHING"):
        return
    keep, leave = [], []
    for item in items:
        takes = {"database", "database_url"} & set(getattr(item, "fixturenames", ()))
        (keep if takes and not item.get_closest_marker("any_database") else leave).append(item)
    if leave:
        config.hook.pytest_deselected(items=leave)
        items[:] = keep


@pytest.fixture(scope="session", autouse=True)
def _fork_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Start chatgate subprocesses by forking one that imported everything once (see
    tests/fakes/forkserver.py); ``CHATGATE_TEST_FORK_SERVER=0`` starts each from scratch."""
    if os.environ.get("CHATGATE_TEST_FORK_SERVER") == "0":
        yield
        return
    root = tmp_path_factory.mktemp("forkserver")
    path = root / "socket"
    server = start_server(path, child_env(), root / "forkserver.log")
    gateway_fakes.FORK_SERVER = str(path)
    try:
        yield
    finally:
        gateway_fakes.FORK_SERVER = None
        server.kill()
        server.wait(10)


@pytest.fixture(autouse=True)
def _network_guard() -> Iterator[None]:
    """Any connection beyond loopback fails the test."""
    netguard.install()
    yield
    netguard.uninstall()


async def _admin(sql: str) -> None:
    engine = create_async_engine(POSTGRES, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(sql))
    finally:
        await engine.dispose()


@pytest.fixture(scope="session")
def _pg_template() -> Iterator[str]:
    name = f"chatgate_tpl_{uuid.uuid4().hex[:8]}"

    async def setup() -> None:
        await _admin(f'CREATE DATABASE "{name}"')
        database = Database(make_url(POSTGRES).set(database=name).render_as_string(False))
        try:
            await database.migrate()
        finally:
            await database.dispose()

    asyncio.run(setup())
    yield name
    asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty (or, on PostgreSQL, freshly migrated) database for this test."""
    if BACKEND == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'chatgate.db'}"
        return
    if BACKEND != "postgresql":
        raise pytest.UsageError(f"CHATGATE_TEST_DATABASE={BACKEND!r}: use sqlite or postgresql")
    template = request.getfixturevalue("_pg_template")
    name = f"chatgate_t_{uuid.uuid4().hex[:10]}"
    # FILE_COPY: 0.1 s a test instead of WAL_LOG's 0.25 s for a database this small.
    asyncio.run(_admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY'))
    yield make_url(POSTGRES).set(database=name).render_as_string(hide_password=False)
    asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    """This test's database, migrated."""
    database = Database(database_url)
    await database.migrate()
    yield database
    await database.dispose()


@pytest.fixture
def model_server() -> Iterator[FakeModelServer]:
    """The fake OpenAI-compatible server, empty script (it echoes)."""
    with FakeModelServer() as server:
        yield server


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A Redis database of its own (1-15), emptied before and after the test."""
    url = f"{REDIS}/{1 + uuid.uuid4().int % 15}"
    db = redis.Redis.from_url(url)
    try:
        db.flushdb()
    except redis.ConnectionError as exc:  # pragma: no cover - the CI starts Redis
        pytest.fail(f"Redis is not answering on {REDIS}: {exc}")
    yield url
    db.flushdb()
    db.close()


@pytest.fixture(autouse=True)
def _tmp_path_reachable_by_the_sandbox(request: pytest.FixtureRequest) -> None:
    """As root, run_command's sandbox runs as nobody, which must be able to enter the state
    directories tests keep under tmp_path (pytest makes them 0700); as for any operator
    running chatgate as root, the directories above the state directory must let others in."""
    if os.getuid() != 0 or "tmp_path" not in request.fixturenames:
        return
    path: Path = request.getfixturevalue("tmp_path")
    for directory in (path, path.parent, path.parent.parent):
        if directory.stat().st_uid == 0:
            directory.chmod(0o711)

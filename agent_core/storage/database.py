"""Engine creation and migrations: SQLite (WAL, busy timeout) or PostgreSQL (asyncpg)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from agent_core.errors import StorageError

_MIGRATIONS = str(Path(__file__).with_name("migrations"))
# Any constant works; it only has to be the same in every chatgate process.
_MIGRATION_LOCK_ID = 0x63_68_61_74


def _sqlite_file(url: str) -> Path | None:
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def create_engine(url: str, *, echo: bool = False) -> AsyncEngine:
    """Create the async engine for ``url``, with SQLite tuned for concurrent use."""
    if not url.startswith("sqlite"):
        return create_async_engine(url, echo=echo, pool_pre_ping=True, pool_size=10)
    path = _sqlite_file(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_async_engine(url, echo=echo, connect_args={"timeout": 30})
    _tune_sqlite(engine)
    return engine


def _tune_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control from the driver so BEGIN IMMEDIATE below is ours.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # IMMEDIATE takes the write lock up front, so a read-then-write transaction waits
        # on busy_timeout instead of failing with "database is locked" when it upgrades.
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _upgrade(connection: Connection, revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", _MIGRATIONS)
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


def _current(connection: Connection) -> tuple[str | None, str | None]:
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(_MIGRATIONS)
    context = MigrationContext.configure(connection)
    return context.get_current_revision(), script.get_current_head()


async def migrate(engine: AsyncEngine, revision: str = "head") -> None:
    """Apply Alembic migrations up to ``revision``; safe to run from many processes at once."""
    try:
        async with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                await conn.execute(text(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK_ID})"))
            await conn.run_sync(_upgrade, revision)
    except (SQLAlchemyError, OSError) as exc:
        raise StorageError(f"migrating {engine.url.render_as_string()} failed: {exc}") from exc


async def revision_status(engine: AsyncEngine) -> tuple[str | None, str | None]:
    """Return (the database's revision, the newest revision this code knows)."""
    async with engine.connect() as conn:
        return await conn.run_sync(_current)


async def ping(engine: AsyncEngine) -> None:
    """Raise :class:`StorageError` unless the database answers a trivial query."""
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except (SQLAlchemyError, OSError) as exc:
        raise StorageError(str(exc)) from exc


@contextlib.asynccontextmanager
async def open_engine(url: str, *, run_migrations: bool = True) -> AsyncIterator[AsyncEngine]:
    """Create the engine, migrate it, and dispose of it on exit."""
    engine = create_engine(url)
    try:
        if run_migrations:
            await migrate(engine)
        yield engine
    finally:
        await engine.dispose()

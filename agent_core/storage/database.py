"""The database: SQLite (WAL, busy timeout) or PostgreSQL (asyncpg), and migrations.

Every transaction is one plain function over a SQLAlchemy ``Connection``; :class:`Database`
runs it off or on the event loop, whichever is cheaper for the backend:

- SQLite runs the whole function with the stdlib driver right on the event loop when the
  database is free, else on one thread that commits the writes waiting together in one
  transaction (:mod:`agent_core.storage.sqlite_runner`). (aiosqlite hops threads for every
  cursor call, which measured about 12 times the CPU per statement.)
- PostgreSQL runs it through the async engine's ``run_sync``, so asyncpg does the I/O on
  the event loop.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import SQLAlchemyError

from agent_core.errors import StorageError
from agent_core.hardening import private_file
from agent_core.storage.sqlite_runner import SQLiteRunner

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

P = ParamSpec("P")
T = TypeVar("T")

_MIGRATIONS = str(Path(__file__).with_name("migrations"))
# Any constant works; it only has to be the same in every chatgate process.
_MIGRATION_LOCK_ID = 0x63_68_61_74


def sqlite_path(url: str) -> Path | None:
    """The SQLite database file a URL names (None: not SQLite, or in memory)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def _sqlite_engine(url: str) -> Engine:
    sync_url = make_url(url).set(drivername="sqlite")
    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # The database holds every conversation: ours alone, whatever the umask was when
        # it (or its WAL, which SQLite creates with the database's mode) was made.
        for suffix in ("", "-wal", "-shm"):
            part = path.with_name(f"{path.name}{suffix}")
            if suffix == "" or part.exists():
                private_file(part)
    engine = create_engine(
        sync_url,
        connect_args={"timeout": 30, "check_same_thread": False},
        # Two connections, kept for as long as they work: the event loop's and the thread's.
        pool_size=2,
        max_overflow=0,
        # Every transaction ends with its own COMMIT or ROLLBACK, so the pool's extra
        # ROLLBACK on return is waste.
        pool_reset_on_return=None,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control from the driver: the runner says BEGIN itself.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()
        # SQLite's lower() and LIKE fold ASCII only: searches fold with Python's casefold.
        dbapi_connection.create_function("chatgate_fold", 1, _fold, deterministic=True)

    return engine


def _fold(value: object) -> object:
    return value.casefold() if isinstance(value, str) else value


class Database:
    """One database, with transactions given as plain functions over a connection."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.dialect = make_url(url).get_backend_name()
        self._sync: Engine | None = None
        self._async: AsyncEngine | None = None
        self._sqlite: SQLiteRunner | None = None
        # Told each committed write's name and duration (the gateway's metrics).
        self.on_commit: Callable[[str, float], None] | None = None
        if self.dialect == "sqlite":
            self._sync = _sqlite_engine(url)
            self._sqlite = SQLiteRunner(self._sync)
        else:
            # Imported here: SQLite does not need it, and it costs memory in every process.
            from sqlalchemy.ext.asyncio import create_async_engine

            self._async = create_async_engine(url, pool_size=10, max_overflow=10)

    def display_url(self) -> str:
        """The URL with any password hidden."""
        return make_url(self.url).render_as_string(hide_password=True)

    async def write(
        self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Run ``fn(connection, ...)`` in one transaction and commit it."""
        if self.on_commit is None:
            return await self._run(fn, args, kwargs, read_only=False)
        started = time.perf_counter()
        result = await self._run(fn, args, kwargs, read_only=False)
        self.on_commit(getattr(fn, "__name__", "write"), time.perf_counter() - started)
        return result

    async def read(
        self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Run ``fn(connection, ...)`` in a read-only transaction."""
        return await self._run(fn, args, kwargs, read_only=True)

    async def write_long(
        self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """``write`` for a transaction that may take long (an erasure, a retention pass):
        never on the event loop, which SQLite's fast path would otherwise use."""
        return await self._run(fn, args, kwargs, read_only=False, here=False)

    async def read_long(
        self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """``read`` for a query that may take long (a search, a sum over every model call):
        never on the event loop."""
        return await self._run(fn, args, kwargs, read_only=True, here=False)

    async def _run(
        self, fn: Callable[..., T], args: Any, kwargs: Any, *, read_only: bool, here: bool = True
    ) -> T:
        if self._sqlite is not None:
            if read_only:
                return await self._sqlite.read(fn, args, kwargs, here=here)
            return await self._sqlite.write(fn, args, kwargs, here=here)
        assert self._async is not None
        if read_only:
            async with self._async.connect() as aconn:
                return await aconn.run_sync(lambda conn: fn(conn, *args, **kwargs))
        async with self._async.begin() as aconn:
            return await aconn.run_sync(lambda conn: fn(conn, *args, **kwargs))

    async def ping(self) -> None:
        """Raise :class:`StorageError` unless the database answers a trivial query."""
        try:
            await self.read(lambda conn: conn.execute(text("SELECT 1")).scalar())
        except (SQLAlchemyError, OSError) as exc:
            raise StorageError(str(exc).splitlines()[0]) from exc

    async def migrate(self, revision: str = "head") -> None:
        """Apply Alembic migrations up to ``revision``; safe from many processes at once."""
        try:
            # Off the event loop on SQLite: it may wait for another process's migration,
            # and an upgrade takes seconds.
            await self._run(_upgrade, (revision,), {}, read_only=False, here=False)
        except (SQLAlchemyError, OSError) as exc:
            message = str(exc).splitlines()[0]
            raise StorageError(f"migrating {self.display_url()} failed: {message}") from exc

    async def revision_status(self) -> tuple[str | None, str | None]:
        """Return (the database's revision, the newest revision this code knows)."""
        return await self.read(_current)

    async def dispose(self) -> None:
        """Close every connection and the worker threads."""
        if self._sqlite is not None:
            await self._sqlite.close()
        if self._sync is not None:
            self._sync.dispose()
        if self._async is not None:
            await self._async.dispose()


def newest_revision() -> str:
    """The head revision, read off the file names (``NNNN_name.py``, one linear chain)
    without importing Alembic, which costs every process about 9 MiB."""
    return max(path.name[:4] for path in Path(_MIGRATIONS, "versions").glob("[0-9]*.py"))


def _stamped(connection: Connection) -> str | None:
    if not connection.dialect.has_table(connection, "alembic_version"):
        return None
    return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()


def _upgrade(connection: Connection, revision: str) -> None:
    if connection.dialect.name == "postgresql":
        connection.execute(text(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK_ID})"))
    stamped, newest = _stamped(connection), newest_revision()
    if revision == "head" and stamped == newest:
        return  # the common case at start-up: nothing to do, and no Alembic to load
    if stamped is not None and stamped > newest:
        # A rollback to an older chatgate: its code does not know this schema.
        raise StorageError(
            f"the database is at schema revision {stamped}, newer than this chatgate knows "
            f"({newest}); run the newer chatgate (or restore the backup taken before it)"
        )
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", _MIGRATIONS)
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


def _current(connection: Connection) -> tuple[str | None, str | None]:
    return _stamped(connection), newest_revision()


@contextlib.asynccontextmanager
async def open_database(url: str, *, run_migrations: bool = True) -> AsyncIterator[Database]:
    """Open the database, migrate it, and close it on exit."""
    database = Database(url)
    try:
        if run_migrations:
            await database.migrate()
        yield database
    finally:
        await database.dispose()

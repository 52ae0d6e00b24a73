"""Where SQLite's transactions run: on the event loop when the database is free, else on
one thread that commits the writes waiting for it in groups.

A transaction on SQLite is tens of microseconds of work; a hop to a thread and back costs
more than that in a busy process (two handoffs of the GIL, a wake-up of the event loop).
So a transaction first runs right on the caller's thread, on a connection of its own that
never waits for a lock (``busy_timeout=0``): in WAL mode a write needs only the write lock,
taken up front by ``BEGIN IMMEDIATE``, and a read needs none. When the database is busy
(another process, or the thread, holds the write lock) nothing was done and the
transaction goes to the thread instead, whose connection waits for the lock
(``busy_timeout``) while the event loop goes on.

The thread runs every write that is waiting when it gets to it in one transaction, each in
a savepoint of its own (a write that raises is rolled back alone, and its caller gets the
error), committed once, with one wake-up of the event loop for all of them. Either way a
caller hears its result only after its ``COMMIT``.

The loop's connection does not checkpoint the WAL (a checkpoint writes the pages back and
syncs the file, which the loop should not wait for): every ``CHECKPOINT_EVERY`` of its
commits, the thread does.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, OperationalError

T = TypeVar("T")

CHECKPOINT_EVERY = 500
RESTART_WAIT_MS = 200
"""How long a checkpoint may hold off writers while it waits for readers to leave the WAL."""


@dataclass(slots=True)
class _Write:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]


class SQLiteRunner:
    """One SQLite database's two connections: the event loop's and the thread's."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="sqlite")
        self._conn: Connection | None = None  # the thread's
        self._lock = threading.Lock()
        self._pending: list[_Write] = []
        self._draining = False
        self._here: Connection | None = None  # the loop's
        self._here_thread: int | None = None
        self._commits_here = 0
        # Set while a checkpoint is queued or running on the thread: the loop's writes
        # queue behind it instead, so a steady stream of them cannot starve its lock.
        self._checkpointing = False

    async def write(self, fn: Callable[..., T], args: Any, kwargs: Any, *, here: bool) -> T:
        """Run ``fn(connection, *args, **kwargs)`` in a committed write transaction: on this
        thread when ``here`` and the database is free, else on the thread (grouped with the
        writes waiting beside it)."""
        free = not self._draining and not self._checkpointing
        if here and free and (conn := self._connection_here()) is not None:
            done, result = self._try_here(conn, fn, args, kwargs, read_only=False)
            if done:
                self._committed_here()
                return result
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._pending.append(_Write(fn, args, kwargs, loop, future))
            start, self._draining = not self._draining, True
        if start:
            self._thread.submit(self._drain)
        return await future

    async def read(self, fn: Callable[..., T], args: Any, kwargs: Any, *, here: bool = True) -> T:
        """Run ``fn(connection, *args, **kwargs)`` in a read-only transaction: on this thread
        when ``here`` and the database is free, else on the thread."""
        if here and (conn := self._connection_here()) is not None:
            done, result = self._try_here(conn, fn, args, kwargs, read_only=True)
            if done:
                return result
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._read, fn, args, kwargs)

    async def close(self) -> None:
        """Close both connections and end the thread, after what is queued."""
        here, self._here = self._here, None
        if here is not None:
            with contextlib.suppress(Exception):
                here.close()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self._drop)
        self._thread.shutdown(wait=True)

    # -- on the caller's thread ------------------------------------------------------------

    def _connection_here(self) -> Connection | None:
        """The loop's connection; None on any other thread (a connection is one thread's)."""
        me = threading.get_ident()
        if self._here_thread is None:
            self._here_thread = me
        if me != self._here_thread:
            return None
        conn = self._here
        if conn is None or conn.closed or conn.invalidated:
            if conn is not None:
                _discard(conn)
            conn = self._here = self._engine.connect()
            raw = conn.connection.dbapi_connection
            assert raw is not None
            raw.execute("PRAGMA busy_timeout=0")
            raw.execute("PRAGMA wal_autocheckpoint=0")
        return conn

    def _try_here(
        self,
        conn: Connection,
        fn: Callable[..., T],
        args: Any,
        kwargs: Any,
        *,
        read_only: bool,
    ) -> tuple[bool, T]:
        """(True, result), or (False, None) when the database was busy: then the
        transaction was rolled back (or never began) and nothing of it happened."""
        try:
            with _transaction(conn, read_only=read_only):
                return True, fn(conn, *args, **kwargs)
        except BaseException as exc:
            if conn.invalidated or conn.in_transaction():
                self._here = None
                _discard(conn)
            if isinstance(exc, OperationalError) and _busy(exc):
                return False, None  # type: ignore[return-value]
            raise

    def _committed_here(self) -> None:
        self._commits_here += 1
        if self._commits_here % CHECKPOINT_EVERY == 0 and not self._checkpointing:
            self._checkpointing = True
            self._thread.submit(self._checkpoint)

    # -- on the thread ---------------------------------------------------------------------

    def _connection(self) -> Connection:
        conn = self._conn
        if conn is None or conn.closed or conn.invalidated:
            self._drop()
            conn = self._conn = self._engine.connect()
        return conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _settled(self, conn: Connection) -> None:
        """After a transaction that raised: a connection left in a transaction (its rollback
        failed) or invalidated is not used again."""
        if conn.invalidated or conn.in_transaction():
            self._conn = None
            _discard(conn)

    def _checkpoint(self) -> None:
        """Write the WAL's pages back into the database, and see that the next write starts
        the WAL over from its beginning.

        A passive checkpoint waits for nobody, but under a steady stream of writes it never
        catches up with the last one, and a WAL is only reused once everything in it has been
        written back: alone, it lets the file grow without end. So it does the bulk of the
        copying, and a restart checkpoint then holds off writers for the few frames left and
        for the readers still on the WAL, within ``RESTART_WAIT_MS``. Meanwhile the loop's
        writes queue on this thread, behind it (without that, back-to-back writes on the
        loop kept the lock busy past the wait often enough that the WAL grew)."""
        try:
            self._checkpoint_now()
        finally:
            self._checkpointing = False

    def _checkpoint_now(self) -> None:
        with contextlib.suppress(Exception):
            raw = self._connection().connection.dbapi_connection
            assert raw is not None
            raw.execute("PRAGMA wal_checkpoint(PASSIVE)")
            (patience,) = raw.execute("PRAGMA busy_timeout").fetchone()
            raw.execute(f"PRAGMA busy_timeout={RESTART_WAIT_MS}")
            try:
                raw.execute("PRAGMA wal_checkpoint(RESTART)")
            finally:
                raw.execute(f"PRAGMA busy_timeout={int(patience)}")

    def _read(self, fn: Callable[..., T], args: Any, kwargs: Any) -> T:
        conn = self._connection()
        try:
            with _transaction(conn, read_only=True):
                return fn(conn, *args, **kwargs)
        except BaseException:
            self._settled(conn)
            raise

    def _drain(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
        while batch:
            outcomes = self._commit(batch)
            with self._lock:
                # Said before the callers hear back, so that their next write may run on
                # the event loop again.
                following, self._pending = self._pending, []
                self._draining = bool(following)
            by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Write, bool, Any]]] = {}
            for write, outcome in zip(batch, outcomes, strict=True):
                by_loop.setdefault(write.loop, []).append((write, *outcome))
            for loop, settled in by_loop.items():
                with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                    loop.call_soon_threadsafe(_settle, settled)
            batch = following

    def _commit(self, batch: list[_Write]) -> list[tuple[bool, Any]]:
        """(ok, result or exception) for each write, once the transaction has ended."""
        outcomes: list[tuple[bool, Any]] = []
        conn: Connection | None = None
        try:
            conn = self._connection()
            with _transaction(conn, read_only=False):
                if len(batch) == 1:
                    write = batch[0]
                    outcomes.append((True, write.fn(conn, *write.args, **write.kwargs)))
                else:
                    for write in batch:
                        savepoint = conn.begin_nested()
                        try:
                            result = write.fn(conn, *write.args, **write.kwargs)
                        except Exception as exc:
                            savepoint.rollback()
                            outcomes.append((False, exc))
                        else:
                            savepoint.commit()
                            outcomes.append((True, result))
        except BaseException as exc:
            if conn is not None:
                self._settled(conn)
            # Nothing of this transaction was committed: every write that had not failed
            # on its own fails with it.
            done = outcomes + [(True, None)] * (len(batch) - len(outcomes))
            return [outcome if not outcome[0] else (False, exc) for outcome in done]
        return outcomes


@contextlib.contextmanager
def _transaction(conn: Connection, *, read_only: bool) -> Iterator[None]:
    """SQLAlchemy's transaction, begun with SQLite's own ``BEGIN``: ``IMMEDIATE`` for a
    write, so that it takes the write lock up front and a read-then-write transaction waits
    for it (on the loop's connection: fails at once, and goes to the thread) instead of
    failing with "database is locked" when it upgrades.

    Said here, on the driver's connection, not by a ``begin`` listener on the engine: any
    listener makes SQLAlchemy dispatch its statement events on every execute, and
    ``exec_driver_sql`` builds an execution context for the BEGIN (the two were 16 % of
    ``accept_inbound``'s CPU here). A driver's error is wrapped as SQLAlchemy wraps it
    (``_busy`` reads ``OperationalError``'s code)."""
    with conn.begin():
        raw = conn.connection.dbapi_connection
        assert raw is not None
        statement = "BEGIN" if read_only else "BEGIN IMMEDIATE"
        try:
            raw.execute(statement)
        except sqlite3.Error as exc:
            raise DBAPIError.instance(statement, None, exc, sqlite3.Error) from exc
        yield


def _discard(conn: Connection) -> None:
    """Close a connection that may be broken or inside a transaction: its driver connection
    is thrown away, not handed back to the pool as it is."""
    with contextlib.suppress(Exception):
        conn.invalidate()
    with contextlib.suppress(Exception):
        conn.close()


def _busy(error: OperationalError) -> bool:
    """SQLite said SQLITE_BUSY (or one of its extended codes): someone else holds a lock."""
    code = getattr(error.orig, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_BUSY


def _settle(settled: list[tuple[_Write, bool, Any]]) -> None:
    for write, ok, value in settled:
        if write.future.done():  # its caller was cancelled; the write happened regardless
            continue
        if ok:
            write.future.set_result(value)
        else:
            write.future.set_exception(value)

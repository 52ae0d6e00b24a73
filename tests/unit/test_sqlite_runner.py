"""SQLite's transactions: on the event loop when the database is free, on the thread (in
groups) while another connection holds the write lock; a failing write never takes the
others of its group with it, and nothing is lost either way."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection

from agent_core.storage.database import Database
from agent_core.storage.sqlite_runner import CHECKPOINT_EVERY

# SQLite's own runner, on a file of its own: the SQLite pass runs it (tests/conftest.py).
pytestmark = pytest.mark.any_database


def _setup(conn: Connection) -> None:
    conn.execute(text("CREATE TABLE items (name TEXT PRIMARY KEY, thread TEXT)"))


def _insert(conn: Connection, name: str) -> str:
    conn.execute(
        text("INSERT INTO items (name, thread) VALUES (:n, :t)"),
        {"n": name, "t": threading.current_thread().name},
    )
    return name


def _insert_then_fail(conn: Connection, name: str) -> None:
    _insert(conn, name)
    raise LookupError(name)


def _items(conn: Connection) -> dict[str, str]:
    return {str(r[0]): str(r[1]) for r in conn.execute(text("SELECT name, thread FROM items"))}


@pytest.fixture
async def database(tmp_path: Path):  # type: ignore[no-untyped-def]
    database = Database(f"sqlite+aiosqlite:///{tmp_path / 'runner.db'}")
    await database.write(_setup)
    yield database
    await database.dispose()


async def test_a_free_database_is_written_on_the_event_loop(database: Database) -> None:
    assert await database.write(_insert, "a") == "a"
    here = threading.current_thread().name
    assert await database.read(_items) == {"a": here}


async def test_writes_wait_for_the_lock_on_the_thread_and_fail_alone_in_a_group(
    database: Database, tmp_path: Path
) -> None:
    """Another connection holds the write lock: writes go to the thread (the loop goes
    on), wait there, and once the lock is free commit together; the one that raises is
    rolled back alone and its caller gets its own error."""
    other = sqlite3.connect(tmp_path / "runner.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    writes = [
        asyncio.ensure_future(database.write(_insert, "first")),
        asyncio.ensure_future(database.write(_insert, "second")),
        asyncio.ensure_future(database.write(_insert_then_fail, "broken")),
        asyncio.ensure_future(database.write(_insert, "third")),
    ]
    # The event loop is not held up by the writes waiting for the lock.
    started = time.monotonic()
    await asyncio.sleep(0.3)
    assert time.monotonic() - started < 0.5
    assert not any(write.done() for write in writes)
    # Reads need no lock in WAL mode: they go on meanwhile.
    assert await database.read(_items) == {}
    other.rollback()
    other.close()
    results = await asyncio.gather(*writes, return_exceptions=True)
    assert results[:2] == ["first", "second"]
    assert isinstance(results[2], LookupError)
    assert results[3] == "third"
    stored = await database.read(_items)
    assert sorted(stored) == ["first", "second", "third"]
    assert all(thread.startswith("sqlite") for thread in stored.values())
    # Free again: the next write is the loop's own once more.
    await database.write(_insert, "after")
    assert (await database.read(_items))["after"] == threading.current_thread().name


async def test_a_write_that_raises_on_the_event_loop_leaves_nothing(database: Database) -> None:
    with pytest.raises(LookupError):
        await database.write(_insert_then_fail, "broken")
    await database.write(_insert, "next")
    assert sorted(await database.read(_items)) == ["next"]


async def test_a_cancelled_caller_does_not_undo_its_write(
    database: Database, tmp_path: Path
) -> None:
    """A write queued on the thread happens even when its caller stops waiting (it was
    handed over), as a write on the event loop does."""
    other = sqlite3.connect(tmp_path / "runner.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    write = asyncio.ensure_future(database.write(_insert, "handed over"))
    await asyncio.sleep(0.1)
    write.cancel()
    other.rollback()
    other.close()
    for _ in range(100):
        if await database.read(_items):
            break
        await asyncio.sleep(0.02)
    assert list(await database.read(_items)) == ["handed over"]


async def test_the_wal_is_checkpointed_off_the_loop_and_stays_short(
    database: Database, tmp_path: Path
) -> None:
    """The loop's connection never checkpoints (a checkpoint syncs the file); the thread
    does, every so many commits, so that under a steady stream of writes the WAL is started
    over instead of growing with every one of them."""
    wal = tmp_path / "runner.db-wal"
    rounds = 16
    sizes = []
    for index in range(rounds * CHECKPOINT_EVERY):
        await database.write(_insert, f"item {index}")
        sizes.append(wal.stat().st_size)
    # The file is reused from its beginning, never shrunk: its size is the most the WAL held.
    # What one round of commits adds, measured before the first checkpoint:
    per_round = sizes[CHECKPOINT_EVERY - 1]
    # Bounded: a round's commits plus those made while a checkpoint ran (1.5 to 4.5 rounds'
    # worth here, as a checkpoint takes 10 to 150 ms), where a WAL never started over holds
    # them all (16 rounds' worth).
    assert max(sizes) < rounds / 2 * per_round, (max(sizes), per_round)

"""Reading a test's database from a test that is not async, or from inside a running event
loop: in a thread of its own, so the caller's thread keeps its event loop as it was."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from agent_core.storage.database import Database

T = TypeVar("T")


def read_database(database_url: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(connection, *args)`` in a read transaction on the database at ``database_url``."""

    async def read() -> T:
        database = Database(database_url)
        try:
            return await database.read(lambda conn: fn(conn, *args))
        finally:
            await database.dispose()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, read()).result()

"""Read the journal a gateway subprocess writes, from the test: when is every turn over?"""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from agent_core.storage.database import open_database
from agent_core.storage.schema import turns
from agent_core.storage.store import Store


def _turns(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).select_from(turns)).scalar_one())


def wait_all_settled(database_url: str, *, started: int = 1, timeout: float = 30) -> None:
    """Wait until at least ``started`` turns exist and none is left to run or finish (a
    resumed one included: its reply delivered and its receipt stored)."""

    async def wait() -> None:
        async with open_database(database_url, run_migrations=False) as database:
            store = Store(database)
            deadline = time.monotonic() + timeout
            while True:
                count = await database.read(_turns)
                if count >= started and await store.open_turn_count() == 0:
                    return
                assert time.monotonic() < deadline, f"{count} turns, some still open"
                await asyncio.sleep(0.05)

    asyncio.run(wait())

"""Named locks: one holder at a time, renewed by its owner, taken over once it expires."""

from __future__ import annotations

import asyncio

from agent_core.storage.database import Database
from agent_core.storage.store import Store


async def test_one_holder_until_it_expires_then_another_takes_over(database: Database) -> None:
    store = Store(database)
    assert await store.take_lock("discord", owner="a", ttl=0.5)
    assert await store.take_lock("discord", owner="a", ttl=0.5)  # ours already: renewed
    assert not await store.take_lock("discord", owner="b", ttl=0.5)
    assert await store.take_lock("telegram", owner="b", ttl=0.5)  # another name is free
    assert await store.renew_lock("discord", owner="a", ttl=0.5)
    assert not await store.renew_lock("discord", owner="b", ttl=0.5)
    await asyncio.sleep(0.7)  # a stopped renewing
    assert await store.take_lock("discord", owner="b", ttl=5)
    assert not await store.renew_lock("discord", owner="a", ttl=5)  # a learns it lost it
    await store.release_lock("discord", owner="a")  # not a's: nothing happens
    assert not await store.take_lock("discord", owner="c", ttl=5)
    await store.release_lock("discord", owner="b")
    assert await store.take_lock("discord", owner="c", ttl=5)


async def test_racing_takers_get_one_holder(database: Database) -> None:
    store = Store(database)
    won = await asyncio.gather(
        *(store.take_lock("slack-socket", owner=f"p{i}", ttl=30) for i in range(8))
    )
    assert sum(won) == 1

"""The lease heartbeat: a lost lease cancels the body; an unreachable database is
tolerated while the lease may still be ours, and not after."""

from __future__ import annotations

import asyncio

import pytest

from agent_core.errors import LeaseLost
from agent_core.turn_lease import heartbeat


async def test_a_database_outage_longer_than_the_lease_stops_the_body() -> None:
    async def renew() -> bool:
        raise OSError("database unreachable")

    with pytest.raises(LeaseLost):
        async with heartbeat(renew, every=0.05, what="x"):
            await asyncio.sleep(5)


async def test_a_short_outage_is_ridden_out() -> None:
    answers = iter([OSError("blip"), True, True, True, True, True, True, True])

    async def renew() -> bool:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    # Periods long enough that a loaded machine's stall (seen: over a second, in CI with the
    # suite running) does not itself outlast the lease's three periods.
    async with heartbeat(renew, every=1.0, what="x"):
        await asyncio.sleep(3.5)


async def test_a_lease_taken_by_someone_else_stops_the_body_at_once() -> None:
    async def renew() -> bool:
        return False

    with pytest.raises(LeaseLost):
        async with heartbeat(renew, every=0.05, what="x"):
            await asyncio.sleep(5)

"""Rate limits in the real Redis: one bucket for every gateway, refilled on Redis's clock,
expiring once full, and a gateway counting alone while Redis is away."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import structlog
from redis.asyncio import Redis

from agent_core.settings import Settings
from gateway.shared_limits import RedisRateLimiter, shared_limiters


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


async def test_two_gateways_spend_one_bucket_and_tell_once(client: Redis) -> None:
    a, b = (RedisRateLimiter(client, name="user", burst=3, per_minute=6) for _ in range(2))
    taken = [await (a if i % 2 == 0 else b).take("telegram:1") for i in range(5)]
    assert taken == [True, True, True, False, False]
    assert await a.allows("telegram:1") is False
    assert await b.allows("telegram:1") is False
    wait = await b.notice("telegram:1")
    assert wait is not None
    assert 9.5 < wait <= 10.0
    assert await a.notice("telegram:1") is None  # told once, by whichever gateway
    assert await a.take("telegram:2") is True  # another key, another bucket
    # The conversation limiter of the same key is a bucket of its own.
    room = RedisRateLimiter(client, name="conversation", burst=1, per_minute=6)
    assert await room.take("telegram:1") is True


async def test_a_bucket_refills_and_expires_once_full(client: Redis) -> None:
    limiter = RedisRateLimiter(client, name="user", burst=2, per_minute=1200)  # 20 a second
    assert [await limiter.take("u") for _ in range(3)] == [True, True, False]
    await asyncio.sleep(0.06)
    assert await limiter.take("u") is True  # refilled by one
    await asyncio.sleep(0.1)
    assert await limiter.notice("u") is None  # a token again: nothing to tell
    # The key lives until the bucket would be full (0.1 s here) plus a second, then goes:
    # an absent bucket is a full one.
    ttl = await client.pttl("chatgate:rate:user:u")
    assert 0 < ttl <= 2 / 20 * 1000 + 1000
    await asyncio.sleep(1.2)
    assert await client.exists("chatgate:rate:user:u") == 0


async def test_without_redis_a_gateway_counts_alone_and_says_so() -> None:
    # A "Redis" that hangs up on every connection, counting them.
    connections = 0

    async def hang_up(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client, users, _rooms = shared_limiters(
        Settings(redis_url=f"redis://127.0.0.1:{port}", rate_burst=2, rate_per_minute=6)
    )
    try:
        with structlog.testing.capture_logs() as logs:
            taken = [await users.take("u") for _ in range(3)]
            assert await users.notice("u") is not None
            assert await users.allows("other") is True
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()
    assert taken == [True, True, False]
    warnings = [e for e in logs if "Redis unreachable" in e["event"]]
    assert len(warnings) == 1, logs
    # One failed try, no retries, then this gateway's own buckets for a while: not a
    # connection attempt per message.
    assert connections == 1

"""Rate limits shared by every gateway, in Redis (the scaled profile).

Behind a load balancer one sender's messages land on any gateway; buckets kept in each
process would let N gateways take N times the rate. Here a bucket is one Redis hash,
refilled and spent by a Lua script in one step, on Redis's own clock (``TIME``), so
gateways whose clocks differ agree. A bucket expires once it would be full again: an
expired bucket and a full one are the same.

When Redis does not answer (within a second, no retries), each gateway counts alone with
its own buckets for the next 10 s and says so in the log, at most once a minute: a message
is never refused, nor held up for long, because the limiter is down.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from redis import RedisError
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from agent_core.ratelimit import CONVERSATION_FACTOR, RateLimiter
from agent_core.settings import Settings

log = structlog.get_logger("chatgate.ratelimit")

# KEYS[1]: the bucket. ARGV: burst, tokens a second, op (allows | take | notice).
# Returns 1/0 for allows and take; for notice the seconds to wait, as a string (Lua
# numbers come back as integers), or false.
_BUCKET = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local op = ARGV[3]
local b = redis.call('HMGET', KEYS[1], 'tokens', 'stamp', 'noticed')
local tokens = tonumber(b[1]) or burst
local stamp = tonumber(b[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - stamp) * rate)
if op == 'allows' then
  return tokens >= 1 and 1 or 0
end
local noticed = b[3] == '1'
local answer
if op == 'take' then
  if tokens < 1 then return 0 end
  tokens = tokens - 1
  noticed = false
  answer = 1
else
  if tokens >= 1 or noticed then return false end
  noticed = true
  answer = tostring((1 - tokens) / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'stamp', tostring(now),
  'noticed', noticed and '1' or '0')
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) / rate * 1000) + 1000)
return answer
"""

_WARN_EVERY = 60.0
_ALONE_FOR = 10.0


def shared_limiters(settings: Settings) -> tuple[Redis, RedisRateLimiter, RedisRateLimiter]:
    """A Redis client (close it) and the per-user and per-conversation limiters over it."""
    assert settings.redis_url is not None
    client = Redis.from_url(
        settings.redis_url,
        socket_timeout=1.0,
        socket_connect_timeout=1.0,
        retry=Retry(NoBackoff(), 0),
    )
    burst, rate = settings.rate_burst, settings.rate_per_minute
    return (
        client,
        RedisRateLimiter(client, name="user", burst=burst, per_minute=rate),
        RedisRateLimiter(
            client,
            name="conversation",
            burst=CONVERSATION_FACTOR * burst,
            per_minute=CONVERSATION_FACTOR * rate,
        ),
    )


class RedisRateLimiter:
    """A :class:`agent_core.ratelimit.Limiter` whose buckets are in Redis."""

    def __init__(self, client: Redis, *, name: str, burst: int, per_minute: float) -> None:
        self._client = client
        self._prefix = f"chatgate:rate:{name}:"
        self._args = (burst, per_minute / 60.0)
        self._script = client.register_script(_BUCKET)
        self._local = RateLimiter(burst=burst, per_minute=per_minute)
        self._alone_until = float("-inf")
        self._warned_at = float("-inf")

    async def _run(self, op: str, key: str, alone: Callable[[str], Awaitable[Any]]) -> Any:
        if time.monotonic() < self._alone_until:
            return await alone(key)
        try:
            return await self._script(keys=[self._prefix + key], args=[*self._args, op])
        except RedisError as exc:
            now = time.monotonic()
            self._alone_until = now + _ALONE_FOR
            if now - self._warned_at >= _WARN_EVERY:
                self._warned_at = now
                log.warning(
                    "rate limits: Redis unreachable, this gateway counts alone", error=str(exc)
                )
            return await alone(key)

    async def allows(self, key: str) -> bool:
        """True when ``key`` has a token (nothing is spent)."""
        return bool(await self._run("allows", key, self._local.allows))

    async def take(self, key: str) -> bool:
        """Spend one of ``key``'s tokens; False (spending none) when it has none."""
        return bool(await self._run("take", key, self._local.take))

    async def notice(self, key: str) -> float | None:
        """The seconds until ``key``'s next token, the first time it is refused until it
        spends one again; None otherwise."""
        wait = await self._run("notice", key, self._local.notice)
        return None if wait is None else float(wait)

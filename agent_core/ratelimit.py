"""Inbound rate limits: token buckets per key, refilled continuously.

Over the limit a message is kept (it was acknowledged) but opens no turn; the sender is told
once, then nothing until the bucket has refilled. Nothing is queued to burst later.

``RateLimiter`` keeps its buckets in this process: right for one gateway. Several gateways
behind a load balancer share theirs in Redis (``gateway.shared_limits``), so the limit
holds however the messages are spread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

# A conversation's bucket is this many times a user's: one user flooding a group spends
# only their own burst of it (``agent_core.gatekeeper``).
CONVERSATION_FACTOR = 3


class Limiter(Protocol):
    """Token buckets by key: ``burst`` at once, then a steady rate."""

    async def allows(self, key: str) -> bool:
        """True when ``key`` has a token (nothing is spent)."""
        ...

    async def take(self, key: str) -> bool:
        """Spend one of ``key``'s tokens; False (spending none) when it has none."""
        ...

    async def notice(self, key: str) -> float | None:
        """The seconds until ``key``'s next token, the first time it is refused until it
        spends one again; None when it has a token or was told already."""
        ...


@dataclass(slots=True)
class _Bucket:
    tokens: float
    stamp: float
    noticed: bool = False


class RateLimiter:
    """``burst`` messages at once, then ``per_minute`` a minute, per key, in this process."""

    def __init__(
        self, *, burst: int, per_minute: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._burst = float(burst)
        self._rate = per_minute / 60.0
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    async def allows(self, key: str) -> bool:
        """True when ``key`` has a token (nothing is spent)."""
        return self._refilled(key).tokens >= 1

    async def take(self, key: str) -> bool:
        """Spend one of ``key``'s tokens; False (spending none) when it has none."""
        bucket = self._refilled(key)
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        bucket.noticed = False
        return True

    async def notice(self, key: str) -> float | None:
        """The seconds until ``key``'s next token, the first time it is refused until it
        spends one again; None when it has a token or was told already."""
        bucket = self._refilled(key)
        if bucket.tokens >= 1 or bucket.noticed:
            return None
        bucket.noticed = True
        return (1 - bucket.tokens) / self._rate

    def _refilled(self, key: str) -> _Bucket:
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(tokens=self._burst, stamp=now)
        bucket.tokens = min(self._burst, bucket.tokens + (now - bucket.stamp) * self._rate)
        bucket.stamp = now
        if len(self._buckets) > 50_000:
            self._forget_full(now)
        return bucket

    def _forget_full(self, now: float) -> None:
        full = [
            k
            for k, b in self._buckets.items()
            if b.tokens + (now - b.stamp) * self._rate >= self._burst
        ]
        for key in full:
            del self._buckets[key]


def local_limiters(*, burst: int, per_minute: float) -> tuple[RateLimiter, RateLimiter]:
    """The per-user and per-conversation limiters of a single gateway."""
    return (
        RateLimiter(burst=burst, per_minute=per_minute),
        RateLimiter(burst=CONVERSATION_FACTOR * burst, per_minute=CONVERSATION_FACTOR * per_minute),
    )

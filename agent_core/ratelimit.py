"""Inbound rate limits: token buckets per key, refilled continuously.

Over the limit a message is kept (it was acknowledged) but opens no turn; the sender is told
once, then nothing until the bucket has refilled. Nothing is queued to burst later. The
buckets live in this process: with several gateways each enforces its own share.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class _Bucket:
    tokens: float
    stamp: float
    noticed: bool = False


class RateLimiter:
    """``burst`` messages at once, then ``per_minute`` a minute, per key."""

    def __init__(
        self, *, burst: int, per_minute: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._burst = float(burst)
        self._rate = per_minute / 60.0
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def allows(self, *keys: str) -> bool:
        """True when every key has a token (nothing is spent)."""
        now = self._clock()
        return all(self._refilled(key, now).tokens >= 1 for key in keys)

    def take(self, *keys: str) -> bool:
        """Spend one token from every key's bucket; False (spending none) if any is empty."""
        now = self._clock()
        buckets = [self._refilled(key, now) for key in keys]
        if any(bucket.tokens < 1 for bucket in buckets):
            return False
        for bucket in buckets:
            bucket.tokens -= 1
            bucket.noticed = False
        return True

    def should_notice(self, *keys: str) -> bool:
        """True the first time a limited sender is refused, until their bucket refills."""
        now = self._clock()
        first = False
        for key in keys:
            bucket = self._refilled(key, now)
            if bucket.tokens < 1 and not bucket.noticed:
                bucket.noticed = True
                first = True
        return first

    def retry_after(self, *keys: str) -> float:
        """Seconds until every key has a token again."""
        now = self._clock()
        missing = max(1 - self._refilled(key, now).tokens for key in keys)
        return max(0.0, missing / self._rate) if self._rate else float("inf")

    def _refilled(self, key: str, now: float) -> _Bucket:
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

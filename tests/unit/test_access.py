"""Access decisions and rate buckets (pure)."""

from __future__ import annotations

import re

import pytest

from agent_core.access import AccessPolicy, pairing_code
from agent_core.events import InboundMessage, Platform
from agent_core.ratelimit import RateLimiter


def _event(
    platform: Platform, user: str, *, workspace: str = "W", channel: str = "C"
) -> InboundMessage:
    return InboundMessage(
        platform=platform,
        workspace=workspace,
        channel=channel,
        user=user,
        text="hi",
        platform_event_id="e",
    )


@pytest.mark.parametrize(
    ("mode", "event", "verdict"),
    [
        ("pairing", _event("telegram", "telegram:42"), "pair"),
        ("allowlist", _event("telegram", "telegram:42"), "refuse"),
        ("open", _event("telegram", "telegram:42"), "allow"),
        ("pairing", _event("telegram", "telegram:7"), "allow"),  # listed user
        ("allowlist", _event("slack", "slack:U9", workspace="T1"), "allow"),  # workspace
        ("allowlist", _event("slack", "slack:U9", workspace="T2"), "refuse"),
        ("allowlist", _event("discord", "discord:5", workspace="G1"), "allow"),  # guild
        ("allowlist", _event("telegram", "telegram:5", channel="-100"), "allow"),  # chat
        ("allowlist", _event("telegram", "telegram:5", channel="-101"), "refuse"),
        ("allowlist", _event("slack", "slack:ADMIN"), "allow"),  # admin
        ("allowlist", _event("web", "web:local"), "allow"),  # the local web user
    ],
)
def test_access_modes_and_allow_entries(mode: str, event: InboundMessage, verdict: str) -> None:
    """Admins, users, workspaces, guilds and chats are admitted; strangers per the mode."""
    policy = AccessPolicy(
        mode=mode,  # type: ignore[arg-type]
        allow=["telegram:7", "slack:T1:*", "discord:guild:G1", "telegram:chat:-100"],
        admins=["slack:ADMIN"],
    )
    assert policy.decide(event, paired=False) == verdict


def test_a_paired_user_is_admitted_under_pairing_and_allowlist() -> None:
    """Pairing admits; allowlist admits paired users too (an admin let them in)."""
    for mode in ("pairing", "allowlist"):
        policy = AccessPolicy(mode=mode, allow=[], admins=[])  # type: ignore[arg-type]
        assert policy.decide(_event("telegram", "telegram:42"), paired=True) == "allow"


def test_pairing_codes_are_readable_and_distinct() -> None:
    """Codes avoid look-alike characters and do not repeat."""
    codes = {pairing_code() for _ in range(200)}
    assert len(codes) == 200
    assert all(re.fullmatch(r"[A-HJKMNP-Z2-9]{4}-[A-HJKMNP-Z2-9]{4}", c) for c in codes)


async def test_a_bucket_allows_the_burst_then_the_rate() -> None:
    """Burst at once, then one more per 60/rate seconds; a notice only once per refill."""
    now = [0.0]
    limiter = RateLimiter(burst=3, per_minute=6, clock=lambda: now[0])
    assert [await limiter.take("u") for _ in range(5)] == [True, True, True, False, False]
    assert await limiter.allows("u") is False
    assert await limiter.notice("u") == pytest.approx(10)
    assert await limiter.notice("u") is None
    now[0] = 10.0
    assert await limiter.allows("u") is True
    assert await limiter.notice("u") is None
    assert await limiter.take("u") is True
    assert await limiter.take("u") is False
    assert await limiter.notice("u") == pytest.approx(10)
    assert await limiter.take("other") is True

"""Who may talk to the agent: admins, allow entries, paired users, and the access mode.

Pure: the dispatcher asks :meth:`AccessPolicy.decide` right after the ingress ledger and
before any model call, tool or schedule, telling it whether the user was paired.

Allow entries (``CHATGATE_ALLOW``):

    slack:U123              one user (any platform: ``platform:user_id``)
    slack:T0123:*           everyone in a Slack workspace
    discord:guild:987       everyone in a Discord guild
    telegram:chat:-100123   everyone in a Telegram chat (a group allowed as a whole)

In a group the bot acts only for allowed users, unless the group itself is allowed.
"""

from __future__ import annotations

import secrets
from collections.abc import Collection
from typing import Literal, TypeAlias

from agent_core.events import InboundMessage

AccessMode: TypeAlias = Literal["pairing", "allowlist", "open"]
Verdict: TypeAlias = Literal["allow", "pair", "refuse"]

# No 0/O, 1/I/L: codes are read aloud and typed by hand.
_CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"


def pairing_code() -> str:
    """A one-time code like ``K7QD-M2XP`` (about 40 bits)."""
    raw = "".join(secrets.choice(_CODE_ALPHABET) for _ in range(8))
    return f"{raw[:4]}-{raw[4:]}"


class AccessPolicy:
    """The access decision for one inbound message."""

    def __init__(
        self, *, mode: AccessMode, allow: Collection[str], admins: Collection[str]
    ) -> None:
        self._mode = mode
        self._allow = frozenset(allow)
        self._admins = frozenset(admins)

    def is_admin(self, user: str) -> bool:
        """Admins may talk, approve anyone's tools and pair strangers."""
        return user in self._admins

    def is_member(self, user: str) -> bool:
        """Admitted on their own: admins, individually listed users, anyone when open (for
        ``role:member`` approvers; paired users are checked by the caller)."""
        return (
            self._mode == "open"
            or user in self._admins
            or user in self._allow
            or user.startswith("web:")
        )

    def decide(self, event: InboundMessage, *, paired: bool) -> Verdict:
        """allow, pair (a stranger under ``pairing``) or refuse (under ``allowlist``)."""
        if event.platform == "web":
            # The web chat answers loopback or the token holder only: its user is the
            # local admin (checked at the HTTP edge).
            return "allow"
        if self.is_admin(event.user) or paired or self._allowed(event):
            return "allow"
        match self._mode:
            case "open":
                return "allow"
            case "allowlist":
                return "refuse"
            case "pairing":
                return "pair"

    def _allowed(self, event: InboundMessage) -> bool:
        candidates = {event.user}
        match event.platform:
            case "slack":
                candidates.add(f"slack:{event.workspace}:*")
            case "discord":
                candidates.add(f"discord:guild:{event.workspace}")
            case "telegram":
                candidates.add(f"telegram:chat:{event.channel}")
        return not candidates.isdisjoint(self._allow)

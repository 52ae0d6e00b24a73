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
from collections.abc import Awaitable, Callable, Collection
from typing import Literal, Protocol, TypeAlias

from agent_core.events import ConversationKey, InboundMessage

AccessMode: TypeAlias = Literal["pairing", "allowlist", "open"]
Verdict: TypeAlias = Literal["allow", "pair", "refuse"]

TRIGGER_USER = "trigger:"
"""The prefix of the user a trigger's turns run as (``agent_core.triggers.user_of``)."""

CONSOLE_OPERATOR = "console:operator"
"""Who acts from the operator console (its token holder, or a loopback client): an admin
everywhere. No platform's events carry this id (theirs start with the platform's name)."""


def with_operator(admins: Collection[str]) -> list[str]:
    """The configured admins and the console's operator."""
    return [*admins, CONSOLE_OPERATOR]


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
        """allow, pair (a stranger under ``pairing``) or refuse (under ``allowlist``).

        A Slack workspace entry matches the sender's own team (a guest from another
        workspace in a shared channel is not let in by the channel's)."""
        if self.admits(event.user, event.conversation, paired=paired, team=event.user_team):
            return "allow"
        match self._mode:
            case "allowlist":
                return "refuse"
            case _:
                return "pair"

    def admits(
        self, user: str, where: ConversationKey, *, paired: bool, team: str | None = None
    ) -> bool:
        """May ``user`` talk to the agent in this conversation? (Asked again before queued
        work runs for them: a revoked user or a dropped allow entry stops it.) ``team``:
        the user's own Slack team when known, else the conversation's."""
        if where.platform == "web":
            # The web chat answers loopback or the token holder only: its user is the
            # local admin (checked at the HTTP edge).
            return True
        if self._mode == "open" or self.is_admin(user) or paired:
            return True
        return self._allowed(user, where, team)

    def _allowed(self, user: str, where: ConversationKey, team: str | None) -> bool:
        candidates = {user}
        match where.platform:
            case "slack":
                candidates.add(f"slack:{team or where.workspace}:*")
            case "discord":
                candidates.add(f"discord:guild:{where.workspace}")
            case "telegram":
                candidates.add(f"telegram:chat:{where.channel}")
        return not candidates.isdisjoint(self._allow)


class MayTalk(Protocol):
    """May ``user`` talk to the agent in ``where`` now? (``team``: their own Slack team,
    when the event says it.)"""

    async def __call__(
        self, user: str, where: ConversationKey, team: str | None = None
    ) -> bool: ...


class Membership:
    """Whether a person may talk to the agent in a conversation now: the policy, then
    (only when the policy alone does not let them in) whether they are paired."""

    def __init__(
        self,
        policy: AccessPolicy,
        is_paired: Callable[[str], Awaitable[bool]],
        trigger_exists: Callable[[str], Awaitable[bool]] | None = None,
    ) -> None:
        self._policy = policy
        self._is_paired = is_paired
        self._trigger_exists = trigger_exists

    async def may_talk(self, user: str, where: ConversationKey, team: str | None = None) -> bool:
        """True when ``user`` may talk to the agent in ``where``. A trigger's turns
        (``trigger:ID``) may while the trigger exists: whoever made it let it in, and no
        allow entry or access mode speaks for it."""
        if user.startswith(TRIGGER_USER):
            trigger_id = user.removeprefix(TRIGGER_USER)
            return self._trigger_exists is not None and await self._trigger_exists(trigger_id)
        if self._policy.admits(user, where, paired=False, team=team):
            return True
        paired = await self._is_paired(user)
        return self._policy.admits(user, where, paired=paired, team=team)

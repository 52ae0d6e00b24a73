"""The gate every inbound message passes right after the ledger: access, then rate.

Strangers get one short message with a pairing code (``pairing``) or a refusal
(``allowlist``) and nothing else: no turn, no model call, no tool. Allowed users over
their rate get one notice, then silence until their bucket refills. Each user has a bucket,
and so has each conversation, three times larger: one user flooding a group spends only
their own burst of it, so the others there are not slowed.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Literal, Protocol, TypeAlias

import structlog
from pydantic import JsonValue

from agent_core.access import AccessPolicy, Membership, pairing_code
from agent_core.delivery import Outbound
from agent_core.events import ConversationKey, InboundMessage, Reply, utcnow
from agent_core.ratelimit import Limiter
from agent_core.records import Accepted
from agent_core.stores import AccessStore, Ledger

log = structlog.get_logger("chatgate.access")

Admission: TypeAlias = Literal["allow", "pair", "refuse", "limited"]
_REFUSAL_EVERY = 3600.0


class GateStore(Ledger, AccessStore, Protocol):
    """What this module asks of the storage."""

    async def trigger_exists(self, trigger_id: str) -> bool:
        """Whether a trigger is active or paused (its queued turns may run)."""
        ...


class Gatekeeper:
    """Decides whether a message may open a turn, and answers those that may not."""

    def __init__(
        self,
        store: GateStore,
        outbound: Outbound,
        *,
        policy: AccessPolicy,
        users: Limiter,
        conversations: Limiter,
        pairing_ttl: timedelta,
        max_pending: int,
    ) -> None:
        self._store = store
        self._outbound = outbound
        self._policy = policy
        self._users = users
        self._conversations = conversations
        self._pairing_ttl = pairing_ttl
        self._max_pending = max_pending
        self._refused: dict[str, float] = {}
        self._membership = Membership(policy, store.is_paired, store.trigger_exists)

    def is_admin(self, user: str) -> bool:
        """Is this user one of the admins (``CHATGATE_ADMINS``)?"""
        return self._policy.is_admin(user)

    async def is_member(self, user: str) -> bool:
        """May this user talk to the agent (outside any particular group)?"""
        return self._policy.is_member(user) or await self._store.is_paired(user)

    async def may_talk(self, user: str, where: ConversationKey, team: str | None = None) -> bool:
        """May this user talk to the agent in this conversation, now?"""
        return await self._membership.may_talk(user, where, team)

    async def admit(self, event: InboundMessage) -> Admission:
        """The verdict for a message (before it is ledgered; nothing is spent yet)."""
        verdict = self._policy.decide(event, paired=False)
        if verdict != "allow":
            verdict = self._policy.decide(event, paired=await self._store.is_paired(event.user))
        if verdict != "allow":
            return verdict
        if self._exempt(event) or (
            await self._users.allows(event.user) and await self._conversations.allows(_room(event))
        ):
            return "allow"
        return "limited"

    async def take_reaction(self, user: str) -> bool:
        """Count a reaction against its person's rate, as a message (False: over it, and
        the reaction counts for nothing). Web presses and admins are not limited."""
        if user.startswith("web:") or self._policy.is_admin(user):
            return True
        if not await self._users.allows(user):
            return False
        await self._users.take(user)
        return True

    async def spend(self, event: InboundMessage) -> None:
        """Count an admitted, new (not duplicate) message against its rates."""
        if not self._exempt(event):
            await self._users.take(event.user)
            await self._conversations.take(_room(event))

    async def answer(self, event: InboundMessage, accepted: Accepted, admission: Admission) -> None:
        """Tell a stranger how to get in, or a fast sender to slow down (once)."""
        text: str | None
        if admission == "pair":
            text = await self._pairing_text(event, accepted)
        elif admission == "refuse":
            text = self._refusal_text(event)
        elif admission == "limited":
            text = None
            limiter, key = (
                (self._users, event.user)
                if not await self._users.allows(event.user)
                else (self._conversations, _room(event))
            )
            retry_after = await limiter.notice(key)
            if retry_after is not None:
                wait = max(1, round(retry_after))
                text = (
                    f"You are sending messages faster than I can take them; I will "
                    f"answer again in about {wait} seconds. Nothing is queued meanwhile."
                )
        else:
            return
        log.info("inbound held", admission=admission, user=event.user, answered=text is not None)
        if text is not None:
            await self.tell(event, accepted, text)

    async def tell(
        self,
        event: InboundMessage,
        accepted: Accepted,
        text: str,
        *,
        payload: dict[str, JsonValue] | None = None,
        private: bool = False,
        noted: bool = False,
    ) -> None:
        """Answer a message without the model: a note in the history, sent to the platform.

        ``payload`` is structured content a platform may render richer than the text
        (the ``jobs`` listing's buttons); ``private``: only the sender should see it,
        where the platform can do that (``Reply.private_to``); ``noted``: the note is in the
        history already (``new`` wrote it), only the platform is told."""
        if not noted:
            await self._store.add_note(accepted.conversation_id, text, payload=payload)
        if event.platform == "web":
            return  # the note is the delivery; the page's stream shows it
        reply = Reply(
            conversation=event.conversation,
            text=text,
            reply_to=event.reply_to,
            idempotency_key=f"access:{event.platform}:{event.platform_event_id}",
            payload=payload,
            private_to=event.user if private else None,
            answers=event.platform_event_id,
        )
        try:
            await self._outbound.send(reply)
        except Exception:
            log.exception("could not answer a held message", user=event.user)

    async def _pairing_text(self, event: InboundMessage, accepted: Accepted) -> str | None:
        outcome, request = await self._store.request_pairing(
            platform=event.platform,
            user=event.user,
            conversation_id=accepted.conversation_id,
            code=pairing_code(),
            expires_at=utcnow() + self._pairing_ttl,
            max_pending=self._max_pending,
        )
        if outcome != "new" or request is None:
            return None  # one message per code; and no flood of codes for admins
        minutes = round(self._pairing_ttl.total_seconds() / 60)
        return (
            f"I only talk to people an admin has let in. Ask an admin to run "
            f"`chatgate pairing approve {request.code}` (valid for {minutes} minutes)."
        )

    def _refusal_text(self, event: InboundMessage) -> str | None:
        now = time.monotonic()
        last = self._refused.get(event.user)
        if last is not None and now - last < _REFUSAL_EVERY:
            return None
        self._refused[event.user] = now
        return "Sorry, I only talk to people on this workspace's allowlist."

    def _exempt(self, event: InboundMessage) -> bool:
        return event.platform == "web" or self._policy.is_admin(event.user)


def _room(event: InboundMessage) -> str:
    return str(event.conversation)

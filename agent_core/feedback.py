"""Reactions as feedback: a 👍 or 👎 a person puts on one of the agent's replies is stored
with the turn that wrote it and with them, and a 👎 asks them, once, what went wrong.

The answer is their next message in that conversation within :data:`ANSWER_WINDOW`: the
ingress ledger keeps it as the rating's comment instead of opening a turn
(``storage.ledger.accept``), so it never reaches the model. The wait is durable: it is the
rating's row with ``asked_at`` set and no comment yet, not anything held in memory.

Only people who may talk to the agent where the reply is count (the gate's ``may_talk``,
the same check every message passes); a reaction on anything but the agent's own reply
changes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Protocol

import structlog

from agent_core.access import MayTalk
from agent_core.delivery import Outbound
from agent_core.events import ConversationKey, Rating, Reaction, Reply, utcnow
from agent_core.records import RatedMessage, RatingChange
from agent_core.stores import FeedbackStore, Ledger

log = structlog.get_logger("chatgate.feedback")

ANSWER_WINDOW = timedelta(minutes=10)
# A 👎 on an older reply is kept, and asks nothing: nobody remembers what went wrong then,
# and a person rating a long history must not make the agent post a question for each.
ASK_WITHIN = timedelta(days=1)
QUESTION = (
    "Sorry that missed. What went wrong? Your next message here goes to the people who run "
    'me, not to the model (say "skip" to skip).'
)
THANKS = "Thanks — noted."
SKIPPED = "OK, skipped."
_SKIP = frozenset({"skip", "/skip", "skip."})


def is_skip(text: str) -> bool:
    """Whether an answer to "what went wrong?" declines to say."""
    return text.strip().lower() in _SKIP


def comment_of(text: str) -> str:
    """What is stored as the comment: the answer, or '' for a skip."""
    return "" if is_skip(text) else text


def acknowledgement(text: str) -> str:
    """What the agent says once the answer is stored."""
    return SKIPPED if is_skip(text) else THANKS


class RatingStore(FeedbackStore, Ledger, Protocol):
    """What this module asks of the storage."""


class Feedback:
    """Ratings from reactions (any platform) and from the web chat's buttons."""

    def __init__(
        self,
        store: RatingStore,
        outbound: Outbound,
        *,
        may_talk: MayTalk,
        within_rate: Callable[[str], Awaitable[bool]] | None = None,
        shown: Callable[[ConversationKey], None] | None = None,
    ) -> None:
        self._store = store
        self._outbound = outbound
        self._may_talk = may_talk
        # Counts a reaction against its person's message rate (False: over it).
        self._within_rate = within_rate
        # Tells the web chat's streams that a conversation has a new item (the question).
        self._shown = shown

    async def react(self, reaction: Reaction) -> RatingChange | None:
        """A 👍/👎 added or taken off a platform message: None when it counts for nothing
        (not the agent's reply, or someone who may not talk to the agent there)."""
        target = await self._store.rated_message(
            reaction.platform, reaction.workspace, reaction.channel, reaction.message_id
        )
        if target is None:
            return None
        if not await self._may_talk(reaction.user, target.conversation, reaction.user_team):
            log.info("reaction by someone who may not talk here", user=reaction.user)
            return None
        if self._within_rate is not None and not await self._within_rate(reaction.user):
            log.info("reaction over its person's rate", user=reaction.user)
            return None
        if reaction.added:
            return await self.rate(target, user=reaction.user, rating=reaction.rating)
        return await self.rate(target, user=reaction.user, rating=None, only=reaction.rating)

    async def rate(
        self,
        target: RatedMessage,
        *,
        user: str,
        rating: Rating | None,
        only: Rating | None = None,
    ) -> RatingChange:
        """Set ``user``'s rating of ``target``'s turn (None takes it off; with ``only``,
        only when it is that one: a 👍 taken off leaves a 👎 alone). A new 👎 asks, once
        per person and turn, what went wrong."""
        change = await self._store.rate(target, user=user, rating=rating, only=only)
        if change.changed:
            log.info(
                "feedback",
                user=user,
                turn_id=target.turn_id,
                rating=change.rating,
                previous=change.previous,
            )
        recent = target.sent_at is None or utcnow() - target.sent_at <= ASK_WITHIN
        if change.rating == "down" and change.asked_at is None and change.feedback_id and recent:
            await self._ask(target, change.feedback_id, user)
        return change

    async def _ask(self, target: RatedMessage, feedback_id: int, user: str) -> None:
        """Post "what went wrong?" under the rated reply, if this person was never asked
        about this turn; the wait for their answer starts with it."""
        if not await self._store.claim_question(feedback_id):
            return
        await self._store.add_note(
            target.conversation_id, QUESTION, key=f"feedback:{feedback_id}:ask"
        )
        if self._shown is not None:
            self._shown(target.conversation)
        if target.conversation.platform == "web":
            return  # the note is the delivery: the page's stream shows it
        try:
            await self._outbound.send(
                Reply(
                    conversation=target.conversation,
                    text=QUESTION,
                    reply_to=target.platform_message_id,
                    idempotency_key=f"feedback:{feedback_id}:ask",
                )
            )
        except Exception:
            # Not asked, so nothing of theirs may be taken as an answer.
            log.exception("could not ask what went wrong", user=user, feedback_id=feedback_id)
            await self._store.question_failed(feedback_id)

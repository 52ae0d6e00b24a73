"""Ratings of the agent's replies (``agent_core.feedback``): what the core asks of the
storage to find a rated message, keep a person's rating and ask "what went wrong?" once."""

from __future__ import annotations

from typing import Protocol

from agent_core.events import Rating
from agent_core.records import RatedMessage, RatingChange


class FeedbackStore(Protocol):
    """Ratings, by turn and person."""

    async def rated_message(
        self, platform: str, workspace: str, channel: str, platform_message_id: str
    ) -> RatedMessage | None:
        """The agent's message (a reply or a note of a turn) with this platform id in any
        conversation of that channel (its threads included); None for anything else."""
        ...

    async def message_to_rate(self, message_id: int) -> RatedMessage | None:
        """The agent's message by our own id (the web chat's buttons), if it may be rated."""
        ...

    async def rate(
        self,
        target: RatedMessage,
        *,
        user: str,
        rating: Rating | None,
        only: Rating | None = None,
    ) -> RatingChange:
        """Set (or, with None, remove; with ``only``, remove only that rating) ``user``'s
        rating of ``target``'s turn, audited when it changes."""
        ...

    async def claim_question(self, feedback_id: int) -> bool:
        """Start waiting for the answer to "what went wrong?" (``asked_at``): False when
        this rating was asked about, or its person was asked about its turn before."""
        ...

    async def question_failed(self, feedback_id: int) -> None:
        """The question could not be posted: wait for no answer."""
        ...

    async def feedback_counts(self, conversation_id: str) -> dict[str, int]:
        """``{"up": N, "down": M}``: the ratings of the conversation's replies so far."""
        ...

    async def ratings_of(self, message_ids: list[int]) -> dict[int, dict[str, str]]:
        """Who rated which of these messages how: {message id: {user: rating}}."""
        ...

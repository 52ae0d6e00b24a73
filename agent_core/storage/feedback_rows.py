"""The store's reads and writes about ratings of the agent's replies (``agent_core.feedback``).
One façade with :class:`~agent_core.storage.store.Store`, which inherits them."""

from __future__ import annotations

from agent_core.events import Rating, utcnow
from agent_core.records import RatedMessage, RatingChange
from agent_core.storage import feedback as feedback_sql
from agent_core.storage.database import Database


class FeedbackRows:
    """Ratings, over :attr:`database`."""

    database: Database

    async def rated_message(
        self, platform: str, workspace: str, channel: str, platform_message_id: str
    ) -> RatedMessage | None:
        """The agent's message with this platform id in that channel (any thread of it)."""
        return await self.database.read(
            feedback_sql.rated_message, platform, workspace, channel, platform_message_id
        )

    async def message_to_rate(self, message_id: int) -> RatedMessage | None:
        """The agent's message by our own id, if it may be rated."""
        return await self.database.read(feedback_sql.message_to_rate, message_id)

    async def rate(
        self,
        target: RatedMessage,
        *,
        user: str,
        rating: Rating | None,
        only: Rating | None = None,
    ) -> RatingChange:
        """Set, change or remove ``user``'s rating of ``target``'s turn (audited)."""
        return await self.database.write(
            feedback_sql.rate, target, user=user, rating=rating, only=only, now=utcnow()
        )

    async def claim_question(self, feedback_id: int) -> bool:
        """Start waiting for the answer to "what went wrong?", once per person and turn."""
        return await self.database.write(feedback_sql.claim_question, feedback_id, now=utcnow())

    async def question_failed(self, feedback_id: int) -> None:
        """The question was not posted: wait for no answer."""
        await self.database.write(feedback_sql.question_failed, feedback_id)

    async def feedback_counts(self, conversation_id: str) -> dict[str, int]:
        """👍 and 👎 given to the conversation's replies so far (``usage``)."""
        return await self.database.read(feedback_sql.counts, conversation_id)

    async def ratings_of(self, message_ids: list[int]) -> dict[int, dict[str, str]]:
        """Who rated which of these messages how (the web chat's buttons)."""
        return await self.database.read(feedback_sql.ratings_of, message_ids)

"""The outbound client: replies, prompts and listings posted with slack_sdk's async Web
API client; every Slack API error becomes a ``DeliveryError`` in one place."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from adapters.chunking import SLACK_LIMIT, split_message
from adapters.markdown import escape_slack, to_slack_mrkdwn
from adapters.slack.parse import bare_user
from adapters.slack.render import approval_blocks, jobs_blocks
from agent_core.errors import DeliveryError
from agent_core.events import ApprovalPrompt, ConversationKey, Edit, Reply
from agent_core.journaled import JobsListing


@contextlib.contextmanager
def _delivered() -> Iterator[None]:
    """Slack's refusals as ours (the error code, e.g. ``channel_not_found``)."""
    from slack_sdk.errors import SlackApiError

    try:
        yield
    except SlackApiError as exc:
        raise DeliveryError(f"slack: {exc.response.get('error', exc)}") from exc


class SlackSender:
    """The send-only client: posts replies and prompts, edits prompts; no live connection.

    429s are retried after Slack's ``Retry-After`` inside the one request that got it, so
    other conversations keep going meanwhile.
    """

    def __init__(self, token: str, *, base_url: str, max_rate_limit_retries: int = 3) -> None:
        self.client = AsyncWebClient(
            token=token,
            base_url=base_url,
            retry_handlers=[
                AsyncConnectionErrorRetryHandler(),
                AsyncRateLimitErrorRetryHandler(max_retry_count=max_rate_limit_retries),
            ],
        )

    async def open(self) -> None:
        """Share one HTTP session (and its kept-alive connections) across every call,
        bolt's included; without it slack_sdk opens a session and a connection per call."""
        if self.client.session is None:
            import aiohttp

            self.client.session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.client.timeout)
            )

    async def close(self) -> None:
        """Close the shared session."""
        session = self.client.session
        if session is not None:
            self.client.session = None
            await session.close()

    async def send(self, reply: Reply | ApprovalPrompt) -> str:
        """Post in the conversation's thread (long text in several messages); the receipt
        is the first message's ``ts``."""
        conversation = reply.conversation
        with _delivered():
            if isinstance(reply, ApprovalPrompt):
                response = await self.client.chat_postMessage(
                    channel=conversation.channel,
                    thread_ts=conversation.thread,
                    text=f"Allow {reply.tool}?",
                    blocks=approval_blocks(reply),
                )
                return str(response["ts"])
            listing = JobsListing.from_payload(reply.payload)
            if listing is not None:
                response = await self.client.chat_postMessage(
                    channel=conversation.channel,
                    thread_ts=conversation.thread,
                    text=escape_slack(reply.text)[:SLACK_LIMIT],
                    blocks=jobs_blocks(reply.text, listing.jobs),
                )
                return str(response["ts"])
            receipts: list[str] = []
            for chunk in split_message(to_slack_mrkdwn(reply.text), SLACK_LIMIT):
                response = await self.client.chat_postMessage(
                    channel=conversation.channel,
                    thread_ts=conversation.thread,
                    text=chunk,
                    unfurl_links=False,
                )
                receipts.append(str(response["ts"]))
        return receipts[0]

    async def edit(self, edit: Edit) -> None:
        """Replace a message (a decided prompt loses its buttons)."""
        listing = JobsListing.from_payload(edit.payload)
        blocks = (
            jobs_blocks(edit.text, listing.jobs)
            if listing is not None
            else [{"type": "section", "text": {"type": "mrkdwn", "text": escape_slack(edit.text)}}]
        )
        with _delivered():
            await self.client.chat_update(
                channel=edit.message.conversation.channel,
                ts=edit.message.message_id,
                text=escape_slack(edit.text)[:SLACK_LIMIT],
                blocks=blocks,
            )

    async def ephemeral(self, conversation: ConversationKey, user: str, text: str) -> None:
        """A message only ``user`` sees (a refusal)."""
        with _delivered():
            await self.client.chat_postEphemeral(
                channel=conversation.channel,
                thread_ts=conversation.thread,
                user=bare_user(user),
                text=escape_slack(text),
            )

"""A Slack reply shown as it is written (:class:`SlackLiveReply`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog
from slack_sdk.errors import SlackApiError

from adapters.chunking import SLACK_LIMIT, split_message
from adapters.markdown import escape_slack, to_slack_mrkdwn
from adapters.slack.calls import STREAM_PREFIX, UNMARKED, delivered, delivery_metadata, sendable
from adapters.slack.parse import bare_user
from agent_core.errors import DeliveryError
from agent_core.events import ConversationKey

if TYPE_CHECKING:
    from adapters.slack.send import SlackSender

log = structlog.get_logger("chatgate.slack")


class SlackLiveReply:
    """A reply shown as it is written. In a thread, Slack's chat streaming API: the first
    update starts a stream (``chat.startStream``, for the person who asked), the next ones
    append what the model wrote since (``chat.appendStream``), and the reply stops it. Text
    cannot be taken back from a stream: when the model starts over (after a tool), the
    stream waits for the reply, which then replaces its text. Where Slack refuses to stream
    (outside a thread, or an app without it), a message posted and updated, and the sender
    remembers not to try again. One update a second at most; a 429 is waited out inside
    the call (slack_sdk's retry handler)."""

    interval = 1.0
    posts = True

    def __init__(
        self,
        sender: SlackSender,
        conversation: ConversationKey,
        *,
        key: str,
        message: str | None,
        reply_to: str | None,
        user: str,
    ) -> None:
        self._sender = sender
        self._conversation = conversation
        self._key = key
        self._user = user
        self._reply_to = reply_to
        self.message = message

    async def show(self, text: str, *, status: str | None) -> None:
        """Start, append to or update the message with the text so far."""
        client, channel = self._sender.client, self._conversation.channel
        if self.message is None and await self._start(text):
            return
        with delivered():
            if self.message is None:
                response = await client.chat_postMessage(
                    channel=channel,
                    thread_ts=self._conversation.thread,
                    text=_draft(text, status),
                    unfurl_links=False,
                    metadata=delivery_metadata(f"{self._key}:live"),
                )
                self.message = str(response["ts"])
            elif not self.message.startswith(STREAM_PREFIX):
                await client.chat_update(
                    channel=channel, ts=self.message, text=_draft(text, status)
                )
            else:
                ts = self.message.removeprefix(STREAM_PREFIX)
                sent, safe = self._sender.streamed.get(ts), sendable(text)
                if sent is None or not safe.startswith(sent) or len(safe) == len(sent):
                    return  # a stream an earlier attempt ran, or text that started over
                await client.chat_appendStream(
                    channel=channel, ts=ts, markdown_text=safe[len(sent) :]
                )
                self._sender.streamed[ts] = safe

    async def recover(self) -> None:
        """Read the thread back after the asking message: a live message posted with its
        key (``<turn>:live``) in its metadata, or, from a stream (which carries none until
        it stops), the bot's own message there with no chatgate metadata."""
        key = f"{self._key}:live"
        found = await self._sender._posted(self._conversation, self._reply_to, [key], unmarked=True)
        if key in found:
            self.message = found[key]
        elif UNMARKED in found:
            self.message = STREAM_PREFIX + found[UNMARKED]

    async def _start(self, text: str) -> bool:
        """Start a stream with ``text``; False where Slack will not stream here."""
        thread, safe = self._conversation.thread, sendable(text)
        if self._sender.streams is False or not thread or not safe:
            return False
        if not self._user.startswith("slack:"):
            # A stream is for a person of the workspace; a trigger's or a schedule's turn
            # without one is posted and updated (and streaming stays on for the rest).
            return False
        try:
            response = await self._sender.client.chat_startStream(
                channel=self._conversation.channel,
                thread_ts=thread,
                markdown_text=safe,
                recipient_team_id=self._conversation.workspace,
                recipient_user_id=bare_user(self._user),
            )
        except SlackApiError as exc:
            error = exc.response.get("error")
            if exc.response.status_code == 429 or error == "ratelimited":
                raise DeliveryError(f"slack: {error}") from exc
            if self._sender.streams is None:
                log.warning(
                    "slack refused to stream a reply; posting and updating instead",
                    error=error,
                )
            self._sender.streams = False
            return False
        self._sender.streams = True
        ts = str(response["ts"])
        self._sender.streamed[ts] = safe
        self.message = STREAM_PREFIX + ts
        return True

    async def close(self) -> None:
        """Nothing to end: the reply stops the stream, or replaces the message."""


def _draft(text: str, status: str | None) -> str:
    """A posted live message's text so far (a message's worth) and the status under it."""
    shown = split_message(to_slack_mrkdwn(text), SLACK_LIMIT - 200)[0] if text.strip() else ""
    line = f"_{escape_slack(status)}_" if status else ("" if shown else "…")
    return "\n\n".join(part for part in (shown, line) if part)

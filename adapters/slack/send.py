"""The outbound client: replies, prompts and listings posted with slack_sdk's async Web
API client; every Slack API error becomes a ``DeliveryError`` in one place."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from adapters.chunking import SLACK_LIMIT, split_message
from adapters.downloads import check_host, download, host_of
from adapters.markdown import escape_slack, to_slack_mrkdwn
from adapters.slack import session as agent_session
from adapters.slack.calls import (
    DELIVERY_EVENT,
    STREAM_PREFIX,
    UNMARKED,
    defang,
    delivered,
    delivery_metadata,
    is_dm,
    unless,
)
from adapters.slack.live import SlackLiveReply
from adapters.slack.parse import EPHEMERAL, bare_user
from adapters.slack.render import approval_blocks, choices_blocks, jobs_blocks
from agent_core.delivery import ChunkSent
from agent_core.errors import DeliveryError
from agent_core.events import ApprovalPrompt, ConversationKey, Edit, OutgoingFile, Reply
from agent_core.faults import FaultPoints
from agent_core.files.fetching import FileUnavailable
from agent_core.journaled import Choices, JobsListing
from agent_core.records import AttachmentRecord, TurnState

log = structlog.get_logger("chatgate.slack")


# How far a resend looks for its earlier delivery: messages, and pages (Slack may hand
# out as few as 15 messages a page, and one page a minute, to some apps).
_LOOKUP_LIMIT = 400
_LOOKUP_PAGES = 3


REACTIONS: dict[TurnState, str] = {
    "received": "eyes",
    "working": "hourglass_flowing_sand",
    "waiting": "raised_hand",
    "done": "white_check_mark",
    "failed": "x",
}
"""The reaction a turn's state shows on the message that opened it."""


class SlackSender:
    """The send-only client: posts replies and prompts, edits prompts; no live connection.

    429s are retried after Slack's ``Retry-After`` inside the one request that got it, so
    other conversations keep going meanwhile. Every message carries its delivery key in
    its metadata; a resend (``resend``: the journal has the intent but no receipt) first
    looks for those keys after the triggering message and posts only what is missing.
    """

    def __init__(
        self,
        token: str,
        *,
        base_url: str,
        max_rate_limit_retries: int = 3,
        faults: FaultPoints | None = None,
    ) -> None:
        self.client = AsyncWebClient(
            token=token,
            base_url=base_url,
            retry_handlers=[
                AsyncConnectionErrorRetryHandler(),
                AsyncRateLimitErrorRetryHandler(max_retry_count=max_rate_limit_retries),
            ],
        )
        self._faults = faults or FaultPoints()
        self._warned_lookup = False
        self._identity: tuple[str, str] | None = None
        # Whether chat.startStream works for this app (None: not tried yet); once Slack
        # refuses it, live replies are posted and updated instead.
        self.streams: bool | None = None
        # The markdown each stream this process runs has been given so far, by ts.
        self.streamed: dict[str, str] = {}
        # Whether agent sessions work for this app (None: not tried yet; see session).
        self.sessions: bool | None = None

    async def open(self) -> None:
        """Share one HTTP session (and its kept-alive connections) across every call,
        bolt's included; without it slack_sdk opens a session and a connection per call."""
        if self.client.session is None:
            import aiohttp

            self.client.session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.client.timeout)
            )

    async def identity(self) -> tuple[str, str]:
        """The bot's user id and bot id (``auth.test``, asked once): the first tells the
        bot's own messages apart, the second the messages it posted.

        Raises ``SlackApiError`` (and slack_sdk's connection errors) while Slack cannot say.
        """
        if self._identity is None:
            answer = await self.client.auth_test()
            self._identity = (str(answer.get("user_id") or ""), str(answer.get("bot_id") or ""))
        return self._identity

    async def fetch(self, file: AttachmentRecord, *, limit: int) -> AsyncIterator[bytes]:
        """A file someone shared (``url_private``, with the bot token; ``files:read``).
        Only from Slack's hosts: the token goes nowhere else."""
        if not file.url:
            raise FileUnavailable("Slack gave no link to it")
        check_host(file.url, (host_of(self.client.base_url), ".slack.com"), platform="Slack")
        await self.open()
        assert self.client.session is not None
        headers = {"Authorization": f"Bearer {self.client.token}"}
        try:
            async for chunk in download(
                self.client.session, file.url, headers=headers, platform="Slack"
            ):
                yield chunk
        except FileUnavailable as exc:
            raise FileUnavailable(f"{exc} (the Slack app needs the files:read scope)") from exc

    async def close(self) -> None:
        """Close the shared session."""
        session = self.client.session
        if session is not None:
            self.client.session = None
            await session.close()

    async def send(
        self, reply: Reply | ApprovalPrompt, *, progress: ChunkSent | None = None
    ) -> str:
        """Post in the conversation's thread (long text in several messages); the receipt
        is the first message's ``ts``. A reply shown as it was written goes into that
        message (see :meth:`_finish`) instead of its first post."""
        conversation = reply.conversation
        messages: list[dict[str, object]]
        if isinstance(reply, ApprovalPrompt):
            messages = [{"text": f"Allow {reply.tool}?", "blocks": approval_blocks(reply)}]
        elif (listing := JobsListing.from_payload(reply.payload)) is not None:
            messages = [
                {
                    "text": escape_slack(reply.text)[:SLACK_LIMIT],
                    "blocks": jobs_blocks(reply.text, listing.jobs),
                }
            ]
        elif (choices := Choices.from_payload(reply.payload)) is not None:
            messages = [
                {
                    "text": escape_slack(reply.text)[:SLACK_LIMIT],
                    "blocks": choices_blocks(reply.text, choices.choices),
                }
            ]
        else:
            messages = [
                {"text": chunk, "unfurl_links": False}
                for chunk in split_message(to_slack_mrkdwn(reply.text), SLACK_LIMIT)
            ]
        if isinstance(reply, Reply) and reply.private_to and not is_dm(conversation.channel):
            return await self._ephemeral(conversation, reply.private_to, messages)
        keys = [f"{reply.idempotency_key}:{index}" for index in range(len(messages))]
        posted = await self._posted(conversation, reply.reply_to, keys) if reply.resend else {}
        if isinstance(reply, Reply) and reply.live_message is not None:
            live, channel = reply.live_message, conversation.channel
            finished = await self._finish(channel, live, reply.text, messages, keys[0])
            if finished is not None:
                posted[keys[0]] = finished
        receipts: list[str] = []
        with delivered():
            for key, message in zip(keys, messages, strict=True):
                if key in posted:
                    receipts.append(posted[key])
                    continue
                response = await self.client.chat_postMessage(
                    channel=conversation.channel,
                    thread_ts=conversation.thread,
                    metadata=delivery_metadata(key),
                    **message,  # type: ignore[arg-type]
                )
                receipts.append(str(response["ts"]))
                if len(receipts) < len(messages):
                    self._faults.hit("after_chunk_sent")
        return receipts[0]

    async def send_file(self, file: OutgoingFile) -> str:
        """``files_upload_v2`` into the conversation's thread, the caption as its comment;
        the receipt is the file's id. Slack files carry no metadata: a resend first looks
        in the thread for a file of the bot's with the same name and size."""
        where = file.conversation
        if file.resend:
            found = await self._file_posted(where, file.name, len(file.data))
            if found is not None:
                return found
        with delivered():
            answer = await self.client.files_upload_v2(
                channel=where.channel,
                thread_ts=where.thread,
                content=file.data,
                filename=file.name,
                title=file.name,
                initial_comment=file.caption or None,
            )
        uploaded = answer.get("file") or {}
        return f"file:{uploaded.get('id', '')}"

    async def _file_posted(self, where: ConversationKey, name: str, size: int) -> str | None:
        """A file of the bot's with this name and size in the thread (or the channel's
        latest 200 messages), by its id; None when there is none or Slack will not say."""
        try:
            user_id, bot_id = await self.identity()
            page: dict[str, object] = {"channel": where.channel, "limit": 200}
            if where.thread:
                response = await self.client.conversations_replies(ts=where.thread, **page)  # type: ignore[arg-type]
            else:
                response = await self.client.conversations_history(**page)  # type: ignore[arg-type]
        except SlackApiError as exc:
            log.warning("looking for a file already sent failed", error=str(exc))
            return None
        for message in response.get("messages") or []:
            if message.get("user") != user_id and message.get("bot_id") != bot_id:
                continue
            for shared in message.get("files") or []:
                if shared.get("name") == name and shared.get("size") == size:
                    return f"file:{shared.get('id', '')}"
        return None

    async def _posted(
        self,
        conversation: ConversationKey,
        after: str | None,
        keys: list[str],
        *,
        unmarked: bool = False,
    ) -> dict[str, str]:
        """Which of ``keys`` are posted already, by ``ts``: read back from the thread (or
        the channel) after the triggering message, with every message's metadata. A lookup
        Slack refuses (no ``*:history`` scope, say) finds nothing, so the send goes ahead:
        without the scopes a crash at the wrong moment can still mean a duplicate."""
        wanted = set(keys)
        found: dict[str, str] = {}
        seen = pages = 0
        cursor: str | None = None
        try:
            # Only our own messages count: anyone who may post in the channel could post
            # metadata that looks like ours.
            _user, bot_id = await self.identity()
            while seen < _LOOKUP_LIMIT and pages < _LOOKUP_PAGES:
                pages += 1
                page: dict[str, object] = {
                    "channel": conversation.channel,
                    "include_all_metadata": True,
                    "limit": 200,
                }
                if after:
                    page["oldest"] = after
                if cursor:
                    page["cursor"] = cursor
                if conversation.thread:
                    response = await self.client.conversations_replies(
                        ts=conversation.thread,
                        **page,  # type: ignore[arg-type]
                    )
                else:
                    response = await self.client.conversations_history(**page)  # type: ignore[arg-type]
                batch = response.get("messages") or []
                seen += len(batch)
                for message in batch:
                    metadata = message.get("metadata") or {}
                    if not bot_id or message.get("bot_id") != bot_id:
                        continue
                    if metadata.get("event_type") != DELIVERY_EVENT:
                        # With ``unmarked``: the first of ours with none (a stream).
                        if unmarked and message.get("ts") and UNMARKED not in found:
                            found[UNMARKED] = str(message["ts"])
                        continue
                    key = (metadata.get("event_payload") or {}).get("key")
                    if key in wanted and message.get("ts"):
                        found[str(key)] = str(message["ts"])
                if wanted <= found.keys():
                    break
                cursor = (response.get("response_metadata") or {}).get("next_cursor")
                if not response.get("has_more") or not cursor:
                    break
        except SlackApiError as exc:
            if not self._warned_lookup:
                self._warned_lookup = True
                log.warning(
                    "could not look for an earlier delivery before resending; sending anyway "
                    "(add the *:history scopes so a resend after a crash is never a duplicate)",
                    error=exc.response.get("error"),
                )
            return found
        if found:
            log.info("found earlier deliveries; not posting them again", keys=sorted(found))
        return found

    async def _finish(
        self,
        channel: str,
        live: str,
        markdown: str,
        messages: list[dict[str, object]],
        key: str,
    ) -> str | None:
        """Put the reply (its first message) into the message it was shown in, with the
        delivery's metadata; return that message's ts, or None when it is gone.

        A stream this process ran, whose text the reply goes on from, is stopped with the
        rest of it (one call); any other stream is stopped and its message replaced, as is
        a posted live message."""
        stream = live.startswith(STREAM_PREFIX)
        ts = live.removeprefix(STREAM_PREFIX)
        metadata = delivery_metadata(key)
        if stream:
            sent = self.streamed.pop(ts, None)
            safe = defang(markdown)
            if sent is not None and len(messages) == 1 and safe.startswith(sent):
                with delivered():
                    await self.client.chat_stopStream(
                        channel=channel,
                        ts=ts,
                        markdown_text=safe[len(sent) :] or None,
                        metadata=metadata,
                    )
                return ts
            # A stream another attempt ran, or one the reply does not go on from. Stopping
            # it may fail: it ended already, or Slack expired it.
            with contextlib.suppress(SlackApiError):
                await self.client.chat_stopStream(channel=channel, ts=ts)
        first = messages[0]
        try:
            with delivered():
                await self.client.chat_update(
                    channel=channel,
                    ts=ts,
                    text=str(first["text"]),
                    blocks=first.get("blocks", []),  # type: ignore[arg-type]
                    metadata=metadata,
                )
        except DeliveryError as exc:
            if "message_not_found" in str(exc):
                return None
            raise
        return ts

    async def session(
        self, conversation: ConversationKey, state: TurnState, *, title: str, user: str
    ) -> None:
        """The thread's agent session status (``adapters.slack.session``)."""
        await agent_session.set_status(self, conversation, state, title=title, user=user)

    async def direct(self, user: str, *, workspace: str) -> ConversationKey | None:
        """The app's DM with the person (``conversations.open``, ``im:write``)."""
        bare = user.removeprefix("slack:")
        if bare == user or not bare:
            return None
        with delivered():
            answer = await self.client.conversations_open(users=bare)
        channel = answer.get("channel")
        if not isinstance(channel, dict) or not channel.get("id"):
            raise DeliveryError("slack: conversations.open returned no channel")
        return ConversationKey(platform="slack", workspace=workspace, channel=str(channel["id"]))

    async def mark(
        self,
        conversation: ConversationKey,
        message_id: str,
        state: TurnState,
        *,
        previous: TurnState | None,
    ) -> None:
        """A reaction on the message (``reactions:write``), the one for ``previous`` taken
        off; a Slack bot has no typing indicator."""
        if state == previous:
            return
        with delivered():
            if previous is not None:
                with unless("no_reaction"):
                    await self.client.reactions_remove(
                        channel=conversation.channel, timestamp=message_id, name=REACTIONS[previous]
                    )
            with unless("already_reacted"):
                await self.client.reactions_add(
                    channel=conversation.channel, timestamp=message_id, name=REACTIONS[state]
                )

    def live(
        self,
        conversation: ConversationKey,
        *,
        key: str,
        message: str | None,
        reply_to: str | None,
        user: str,
    ) -> SlackLiveReply:
        """Slack's chat stream in the reply's thread, or a message posted and updated where
        streaming is not available."""
        return SlackLiveReply(
            self, conversation, key=key, message=message, reply_to=reply_to, user=user
        )

    async def _ephemeral(
        self, conversation: ConversationKey, user: str, messages: list[dict[str, object]]
    ) -> str:
        """An answer only ``user`` sees (``chat.postEphemeral``; in a DM there is no one
        else, and it is posted as usual). Ephemeral messages carry no metadata and cannot
        be looked up: a resend may show one twice, to that one person. The receipt is
        ``ephemeral:<message_ts>`` (nothing can edit it by that: its buttons' presses
        carry a response_url)."""
        receipts = []
        with delivered():
            for message in messages:
                response = await self.client.chat_postEphemeral(
                    channel=conversation.channel,
                    thread_ts=conversation.thread,
                    user=bare_user(user),
                    text=str(message["text"]),
                    blocks=message.get("blocks"),  # type: ignore[arg-type]
                )
                receipts.append(str(response.get("message_ts") or ""))
        return f"ephemeral:{receipts[0]}"

    async def publish_home(self, user: str, view: dict[str, Any]) -> None:
        """Show ``view`` as ``user``'s App Home tab (``views.publish``)."""
        with delivered():
            await self.client.views_publish(user_id=bare_user(user), view=view)

    async def edit(self, edit: Edit) -> None:
        """Replace a message (a decided prompt loses its buttons); an ephemeral one through
        the response_url its press carried (``replace_original``)."""
        listing = JobsListing.from_payload(edit.payload)
        blocks = (
            jobs_blocks(edit.text, listing.jobs)
            if listing is not None
            else [{"type": "section", "text": {"type": "mrkdwn", "text": escape_slack(edit.text)}}]
        )
        if edit.message.message_id.startswith(EPHEMERAL):
            await self._respond(
                edit.message.message_id.removeprefix(EPHEMERAL),
                text=escape_slack(edit.text)[:SLACK_LIMIT],
                blocks=blocks,
            )
            return
        with delivered():
            await self.client.chat_update(
                channel=edit.message.conversation.channel,
                ts=edit.message.message_id,
                text=escape_slack(edit.text)[:SLACK_LIMIT],
                blocks=blocks,
            )

    async def _respond(self, url: str, *, text: str, blocks: list[dict[str, Any]]) -> None:
        """Redraw the message a response_url belongs to (Slack gives it with the press;
        it works five times in 30 minutes)."""
        # Only Slack's own hooks (or the configured API's host): a press's URL is never
        # followed elsewhere, whoever forged or relayed the press.
        given = urlsplit(url)
        slacks = given.scheme == "https" and given.netloc == "hooks.slack.com"
        if not (slacks or given.netloc == urlsplit(self.client.base_url).netloc):
            raise DeliveryError(f"slack: response_url: {given.netloc or 'nowhere'} is not Slack")
        await self.open()
        hook = AsyncWebhookClient(url, session=self.client.session)
        try:
            answer = await hook.send(text=text, blocks=blocks, replace_original=True)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DeliveryError(f"slack: response_url: {exc or 'timed out'}") from exc
        if answer.status_code != 200:
            raise DeliveryError(f"slack: response_url: {answer.status_code} {answer.body[:200]}")

    async def ephemeral(self, conversation: ConversationKey, user: str, text: str) -> None:
        """A message only ``user`` sees (a refusal)."""
        with delivered():
            await self.client.chat_postEphemeral(
                channel=conversation.channel,
                thread_ts=conversation.thread,
                user=bare_user(user),
                text=escape_slack(text),
            )

"""Slack: Events API payloads and button presses to events, replies and prompts to Slack.

Parsing is pure (payload dicts in, events out) so recorded payloads test it. Identity:

- a conversation is (``slack``, team, channel, thread): a mention in a channel starts a
  thread conversation under the mentioning message (replies go in that thread); a DM is
  one conversation (a DM thread is its own);
- the ledger key of a message is ``msg:{channel}:{ts}``, not the envelope's ``event_id``:
  Slack sends one message as both ``app_mention`` and ``message`` (two event ids) and
  retries with the same ``ts``, so keying on the message makes all of them one turn;
- users are ``slack:{user_id}`` (the form ``CHATGATE_ADMINS`` uses).

The bot's own messages, other bots, edits, deletions and other subtypes are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any

from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from adapters.base import BadRequest
from adapters.chunking import SLACK_LIMIT, split_message
from adapters.markdown import escape_slack, to_slack_mrkdwn
from agent_core.approval_text import for_prompt
from agent_core.errors import DeliveryError
from agent_core.events import (
    ApprovalPrompt,
    Attachment,
    ButtonPress,
    ConversationKey,
    Edit,
    InboundMessage,
    MessageRef,
    Reply,
)

_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
# Subtypes that are still a person writing: a file share, a thread reply also sent to
# the channel. Everything else (edits, deletions, joins, bot posts) is ignored.
_PERSON_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
# Slack allows 50 blocks a message: a title and up to three blocks per schedule.
_MAX_JOBS = 16
# A section's text may hold 3,000 characters; the rest of the prompt needs about 100.
# What a section's text may hold.
_SECTION = 3000
ACTIONS = {
    "chatgate_approve": "approve",
    "chatgate_allow_conversation": "allow_conversation",
    "chatgate_deny": "deny",
}
JOB_ACTIONS = {
    "chatgate_job_pause": "pause",
    "chatgate_job_resume": "resume",
    "chatgate_job_delete": "delete",
}
_JOB_BUTTONS = {
    "active": (("chatgate_job_pause", "Pause"), ("chatgate_job_delete", "Delete")),
    "paused": (("chatgate_job_resume", "Resume"), ("chatgate_job_delete", "Delete")),
    "done": (("chatgate_job_delete", "Delete"),),
}
BUTTONS = (
    ("chatgate_approve", "Approve", "primary"),
    ("chatgate_allow_conversation", "Allow in this conversation", None),
    ("chatgate_deny", "Deny", "danger"),
)


def user_id(slack_user: str) -> str:
    """Our name for a Slack user."""
    return f"slack:{slack_user}"


def parse_event(envelope: Mapping[str, Any], *, bot_user: str | None) -> InboundMessage | None:
    """An ``event_callback`` envelope as an inbound message, or None when it is not one the
    agent answers (the bot's own, another bot's, an edit, a channel message that neither
    mentions the bot nor is in a thread)."""
    event = envelope.get("event")
    team = envelope.get("team_id")
    if not isinstance(event, Mapping) or not isinstance(team, str):
        raise BadRequest("an event_callback needs 'team_id' and 'event'")
    kind = event.get("type")
    if kind not in ("app_mention", "message"):
        return None
    if event.get("subtype") not in _PERSON_SUBTYPES or event.get("bot_id"):
        return None
    user, channel, ts = event.get("user"), event.get("channel"), event.get("ts")
    if not (isinstance(user, str) and isinstance(channel, str) and isinstance(ts, str)):
        return None
    if bot_user is not None and user == bot_user:
        return None
    text = str(event.get("text") or "")
    thread_ts = event.get("thread_ts") if isinstance(event.get("thread_ts"), str) else None
    direct = event.get("channel_type") == "im" or channel.startswith("D")
    mentioned = kind == "app_mention" or (bot_user is not None and f"<@{bot_user}" in text)
    if direct:
        thread = thread_ts
    elif mentioned:
        thread = thread_ts or ts
    elif thread_ts is not None:
        thread = thread_ts  # a reply in a thread: answered if that thread is a conversation
    else:
        return None
    mentions = tuple(user_id(m) for m in _MENTION.findall(text))
    if bot_user is not None:
        text = re.sub(rf"^\s*<@{re.escape(bot_user)}(?:\|[^>]*)?>[\s:,]*", "", text)
    return InboundMessage(
        platform="slack",
        workspace=team,
        channel=channel,
        thread=thread,
        user=user_id(user),
        text=_plain(text).strip() or "(empty message)",
        platform_event_id=f"msg:{channel}:{ts}",
        mentions=mentions,
        attachments=tuple(_attachment(f) for f in event.get("files") or () if isinstance(f, dict)),
        reply_to=ts,
        user_team=_sender_team(envelope, event, team),
        raw={
            "event_id": str(envelope.get("event_id", "")),
            "kind": str(kind),
            "addressed": direct or mentioned,
        },
    )


def _sender_team(envelope: Mapping[str, Any], event: Mapping[str, Any], team: str) -> str:
    """The sender's own team: the installation's, unless the channel is shared with other
    organisations (Slack Connect); then ``user_team`` (or the event's ``team``), and an
    id no allow entry names when Slack gives neither."""
    if envelope.get("is_ext_shared_channel") is not True:
        return team
    for key in ("user_team", "team"):
        value = event.get(key)
        if isinstance(value, str) and value:
            return value
    return "?"


def mentions_bot(event: InboundMessage) -> bool:
    """Did the message address the bot (a mention or a DM), rather than merely reply in a
    thread?"""
    return event.raw.get("addressed") is True


def parse_action(payload: Mapping[str, Any]) -> ButtonPress | None:
    """A ``block_actions`` payload as a button press (None when it is not one of ours)."""
    actions = payload.get("actions")
    user = payload.get("user")
    team = payload.get("team")
    channel = payload.get("channel")
    message = payload.get("message") or payload.get("container") or {}
    if not (isinstance(actions, list) and actions and isinstance(user, Mapping)):
        raise BadRequest("a block_actions payload needs 'actions' and 'user'")
    action = actions[0]
    if not isinstance(action, Mapping):
        return None
    action_id = action.get("action_id")
    if action_id not in ACTIONS and action_id not in JOB_ACTIONS:
        return None
    value = str(action.get("value") or "")
    if not isinstance(team, Mapping) or not isinstance(channel, Mapping):
        raise BadRequest("a block_actions payload needs 'team' and 'channel'")
    ts = message.get("ts") or message.get("message_ts")
    thread = message.get("thread_ts")
    key = ConversationKey(
        platform="slack",
        workspace=str(team.get("id")),
        channel=str(channel.get("id")),
        thread=str(thread) if thread else None,
    )
    return ButtonPress(
        platform="slack",
        workspace=key.workspace,
        channel=key.channel,
        thread=key.thread,
        user=user_id(str(user.get("id"))),
        approval_id=value if action_id in ACTIONS else None,
        action=ACTIONS.get(str(action_id)) or JOB_ACTIONS[str(action_id)],
        value=value,
        message=MessageRef(conversation=key, message_id=str(ts)) if ts else None,
        # The presser's own team (a Slack Connect guest's is not the channel's).
        user_team=str(user["team_id"]) if isinstance(user.get("team_id"), str) else "?",
        platform_event_id=f"act:{channel.get('id')}:{ts}:{action.get('action_ts')}:{user.get('id')}",
        raw={"response_url": str(payload.get("response_url") or "")},
    )


def parse_command(form: Mapping[str, str]) -> InboundMessage:
    """The ``/chatgate <command>`` slash command as a text command message."""
    for field in ("team_id", "channel_id", "user_id", "trigger_id"):
        if not form.get(field):
            raise BadRequest(f"a slash command needs {field!r}")
    words = (form.get("text") or "").strip()
    return InboundMessage(
        platform="slack",
        workspace=form["team_id"],
        channel=form["channel_id"],
        user=user_id(form["user_id"]),
        text=f"/{words}" if words else "/help",
        platform_event_id=f"cmd:{form['trigger_id']}",
        raw={"addressed": True},
    )


def _pieces(text: str, *, first: int, rest: int) -> list[str]:
    """``text`` in pieces (the first at most ``first`` characters, the others ``rest``),
    never splitting an entity."""
    pieces = []
    size = first
    while len(text) > size:
        cut = text[:size]
        entity = cut.rfind("&")
        if entity > len(cut) - 5:  # do not split &amp; / &lt; / &gt;
            cut = cut[:entity]
        pieces.append(cut)
        text = text[len(cut) :]
        size = rest
    return [*pieces, text]


def approval_blocks(prompt: ApprovalPrompt) -> list[dict[str, Any]]:
    """The prompt as Block Kit: what would run, and the three buttons (approval id in
    each button's value)."""
    shown = for_prompt(prompt.arguments)
    warning = f"\n:warning: {escape_slack(shown.warning)}" if shown.warning else ""
    header = (
        f"*Allow `{escape_slack(prompt.tool)}`?* (asked by <@{_bare(prompt.requested_by)}>)"
        f"{warning}"
    )
    # A section holds 3,000 characters; escaping can grow the text, so it may take several.
    arguments = escape_slack(shown.text).replace("```", "`\u200b``")
    pieces = _pieces(arguments, first=_SECTION - len(header) - 7, rest=_SECTION - 6)
    texts = [f"```{piece}```" for piece in pieces]
    texts[0] = f"{header}\n{texts[0]}"
    sections = [{"type": "section", "text": {"type": "mrkdwn", "text": t}} for t in texts]
    return [
        *sections,
        {
            "type": "actions",
            "block_id": f"approval:{prompt.approval_id}",
            "elements": [
                {
                    "type": "button",
                    "action_id": action_id,
                    "text": {"type": "plain_text", "text": label},
                    "value": prompt.approval_id,
                    **({"style": style} if style else {}),
                }
                for action_id, label, style in BUTTONS
            ],
        },
    ]


def jobs_blocks(text: str, jobs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A ``jobs`` listing as Block Kit: each schedule with its state, latest runs, and
    buttons to pause, resume or delete it (the schedule id in each button's value)."""
    if not jobs:
        return [{"type": "section", "text": {"type": "mrkdwn", "text": escape_slack(text)}}]
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": "*Schedules in this conversation*"}}
    ]
    for job in jobs[:_MAX_JOBS]:
        lines = [
            f"`{escape_slack(str(job.get('id')))}` {escape_slack(str(job.get('when')))}: "
            f"*{escape_slack(str(job.get('status')))}*",
            escape_slack(str(job.get("prompt", "")))[:500],
        ]
        for run in job.get("runs") or ():
            at = str(run.get("scheduled_for") or run.get("finished_at") or "")[:16]
            line = (
                f"• {escape_slack(at.replace('T', ' '))} UTC {escape_slack(str(run.get('status')))}"
            )
            if run.get("error"):
                line += f": {escape_slack(str(run['error']))[:200]}"
            lines.append(line)
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)}})
        buttons = _JOB_BUTTONS.get(str(job.get("status")), ())
        if buttons:
            blocks.append(
                {
                    "type": "actions",
                    "block_id": f"job:{job.get('id')}",
                    "elements": [
                        {
                            "type": "button",
                            "action_id": action_id,
                            "text": {"type": "plain_text", "text": label},
                            "value": str(job.get("id")),
                            **({"style": "danger"} if action_id.endswith("delete") else {}),
                        }
                        for action_id, label in buttons
                    ],
                }
            )
    return blocks


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
        from slack_sdk.errors import SlackApiError

        conversation = reply.conversation
        try:
            if isinstance(reply, ApprovalPrompt):
                response = await self.client.chat_postMessage(
                    channel=conversation.channel,
                    thread_ts=conversation.thread,
                    text=f"Allow {reply.tool}?",
                    blocks=approval_blocks(reply),
                )
                return str(response["ts"])
            jobs = (reply.payload or {}).get("jobs")
            if isinstance(jobs, list):
                response = await self.client.chat_postMessage(
                    channel=conversation.channel,
                    thread_ts=conversation.thread,
                    text=escape_slack(reply.text)[:SLACK_LIMIT],
                    blocks=jobs_blocks(reply.text, [j for j in jobs if isinstance(j, dict)]),
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
        except SlackApiError as exc:
            raise DeliveryError(f"slack: {exc.response.get('error', exc)}") from exc
        return receipts[0]

    async def edit(self, edit: Edit) -> None:
        """Replace a message (a decided prompt loses its buttons)."""
        from slack_sdk.errors import SlackApiError

        jobs = (edit.payload or {}).get("jobs")
        blocks = (
            jobs_blocks(edit.text, [j for j in jobs if isinstance(j, dict)])
            if isinstance(jobs, list)
            else [{"type": "section", "text": {"type": "mrkdwn", "text": escape_slack(edit.text)}}]
        )
        try:
            await self.client.chat_update(
                channel=edit.message.conversation.channel,
                ts=edit.message.message_id,
                text=escape_slack(edit.text)[:SLACK_LIMIT],
                blocks=blocks,
            )
        except SlackApiError as exc:
            raise DeliveryError(f"slack: {exc.response.get('error', exc)}") from exc

    async def ephemeral(self, conversation: ConversationKey, user: str, text: str) -> None:
        """A message only ``user`` sees (a refusal)."""
        await self.client.chat_postEphemeral(
            channel=conversation.channel,
            thread_ts=conversation.thread,
            user=_bare(user),
            text=escape_slack(text),
        )


def _bare(user: str) -> str:
    return user.removeprefix("slack:")


def _plain(text: str) -> str:
    """Slack's escaped text back to what the person typed (``&lt;`` to ``<`` ...)."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _attachment(file: Mapping[str, Any]) -> Attachment:
    size = file.get("size")
    return Attachment(
        name=str(file.get("name") or file.get("title") or "file"),
        mime_type=str(file["mimetype"]) if file.get("mimetype") else None,
        size=int(size) if isinstance(size, int) else None,
        url=str(file["url_private"]) if file.get("url_private") else None,
        platform_file_id=str(file["id"]) if file.get("id") else None,
    )


def build_bolt(
    sender: SlackSender,
    *,
    signing_secret: str | None,
    on_message: Callable[[InboundMessage], Awaitable[None]],
    on_press: Callable[[ButtonPress], Coroutine[Any, Any, None]],
) -> Any:
    """The slack-bolt app: it verifies signatures (401 for a bad or stale one), answers
    ``url_verification``, drops the bot's own events, and hands ours to the callbacks.

    It answers Slack only after a listener returns (``process_before_response``): an event
    is in the ingress ledger before Slack hears 200, so an ack is never a lost message;
    the turn itself runs after the ack. A press is acknowledged first and decided right
    after (Slack does not retry presses; a person can press again).
    """
    import asyncio

    from slack_bolt.async_app import AsyncApp

    bolt = AsyncApp(
        client=sender.client,
        signing_secret=signing_secret,
        # Socket Mode alone (no signing secret): requests come over the authenticated
        # socket, and the HTTP route stays closed.
        request_verification_enabled=signing_secret is not None,
        process_before_response=True,
        raise_error_for_unhandled_request=False,
    )
    pending: set[asyncio.Task[None]] = set()

    async def event(body: dict[str, Any], context: dict[str, Any]) -> None:
        parsed = parse_event(body, bot_user=context.get("bot_user_id"))
        if parsed is not None:
            await on_message(parsed)

    async def action(ack: Callable[[], Awaitable[None]], body: dict[str, Any]) -> None:
        await ack()
        press = parse_action(body)
        if press is not None:
            task = asyncio.create_task(on_press(press))
            pending.add(task)
            task.add_done_callback(pending.discard)

    async def command(ack: Callable[[], Awaitable[None]], command: dict[str, str]) -> None:
        await ack()
        await on_message(parse_command(command))

    async def ignore(body: dict[str, Any]) -> None:
        """Other event types: acknowledged so Slack does not retry them."""

    bolt.event("app_mention")(event)
    bolt.event("message")(event)
    bolt.event(re.compile(".*"))(ignore)
    bolt.action(re.compile("^chatgate_"))(action)
    bolt.command(re.compile(".*"))(command)
    return bolt

"""Slack's payloads to events (pure: payload dicts in, events out, so recorded payloads
test it). Identity:

- a conversation is (``slack``, team, channel, thread): a mention in a channel starts a
  thread conversation under the mentioning message (replies go in that thread); a DM is
  one conversation (a DM thread is its own);
- the ledger key of a message is ``msg:{channel}:{ts}``, not the envelope's ``event_id``:
  Slack sends one message as both ``app_mention`` and ``message`` (two event ids) and
  retries with the same ``ts``, so keying on the message makes all of them one turn;
- users are ``slack:{user_id}`` (the form ``CHATGATE_ADMINS`` uses).

The bot's own messages, other bots, edits, deletions and other subtypes are ignored.

A ``reaction_added`` / ``reaction_removed`` of 👍 or 👎 on a message the bot wrote is a
:class:`~agent_core.events.Reaction`; its item names the channel and ``ts`` only (not the
thread), so the message is looked for in every thread of the channel.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import JsonValue

from adapters.base import BadRequest
from agent_core.command_registry import BY_NAME
from agent_core.events import (
    Attachment,
    ButtonAction,
    ButtonPress,
    ConversationKey,
    InboundMessage,
    MessageDeleted,
    MessageEdited,
    MessageRef,
    Rating,
    Reaction,
    edited,
)

_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
# Subtypes that are still a person writing: a file share, a thread reply also sent to
# the channel. Everything else (edits, deletions, joins, bot posts) is ignored.
_PERSON_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})

ACTIONS: dict[str, ButtonAction] = {
    "chatgate_approve": "approve",
    "chatgate_allow_conversation": "allow_conversation",
    "chatgate_deny": "deny",
}
JOB_ACTIONS: dict[str, ButtonAction] = {
    "chatgate_job_pause": "pause",
    "chatgate_job_resume": "resume",
    "chatgate_job_delete": "delete",
}
# Buttons that answer a question chatgate asked (``forget me``'s confirmation): action ids
# ``chatgate_choice:ACTION:INDEX`` (unique within their block).
CHOICE_ACTIONS: dict[str, ButtonAction] = {"forget": "forget"}


HOME_FORGET = "chatgate_home_forget"
"""The App Home's "Forget me" button: its value is the person's DM with the app, where the
question (Erase / Keep) is asked."""
HOME_JOB = "home_job"
HOME_APPROVAL = "home_approval"
"""Block ids of the App Home's buttons: ``home_job:SCHEDULE:TEAM:CHANNEL:THREAD`` (the
conversation the schedule was created in, which a press needs) and
``home_approval:APPROVAL``."""
EPHEMERAL = "response_url:"
"""How a press names an ephemeral message (chat.update cannot edit one): its
``response_url``, which redraws it (``replace_original``)."""


def choice_action(action_id: object) -> ButtonAction | None:
    """The action of a question's button, by its action id (None: not one): ``forget
    me``'s, or an ``ask_user`` question's (``chatgate_answer:INDEX`` with the value
    ``APPROVAL:INDEX``, and ``chatgate_other`` with the value ``APPROVAL``)."""
    prefix, _, rest = str(action_id).partition(":")
    if prefix == "chatgate_answer":
        return "answer"
    if prefix == "chatgate_other":
        return "other"
    return CHOICE_ACTIONS.get(rest.partition(":")[0]) if prefix == "chatgate_choice" else None


def user_id(slack_user: str) -> str:
    """Our name for a Slack user."""
    return f"slack:{slack_user}"


def bare_user(user: str) -> str:
    """Slack's own id of one of our user names."""
    return user.removeprefix("slack:")


def parse_event(
    envelope: Mapping[str, Any], *, bot_user: str | None
) -> InboundMessage | MessageDeleted | MessageEdited | None:
    """An ``event_callback`` envelope as an inbound message (or a message deleted), or None
    when it is not one the agent answers (the bot's own, another bot's, an edit, a channel
    message that neither mentions the bot nor is in a thread)."""
    event = envelope.get("event")
    team = envelope.get("team_id")
    if not isinstance(event, Mapping) or not isinstance(team, str):
        raise BadRequest("an event_callback needs 'team_id' and 'event'")
    kind = event.get("type")
    if kind not in ("app_mention", "message"):
        return None
    if event.get("subtype") == "message_deleted":
        return _deleted(event, team)
    if event.get("subtype") == "message_changed":
        return _edited(envelope, event, bot_user)
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
        thread = ts  # said to nobody in particular: answered where a profile answers all
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
        }
        | ({"ambient": True} if not (direct or mentioned or thread_ts) else {}),
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


# Slack's names for the emoji that rate a reply (a skin tone is ``+1::skin-tone-2``).
_RATINGS: dict[str, Rating] = {"+1": "up", "thumbsup": "up", "-1": "down", "thumbsdown": "down"}


def parse_reaction(envelope: Mapping[str, Any], *, bot_user: str | None) -> Reaction | None:
    """A ``reaction_added`` or ``reaction_removed`` envelope as a reaction, or None when
    it rates nothing: another emoji, an item that is not a message, a message the bot did
    not write (``item_user``), or the bot's own reaction."""
    event = envelope.get("event")
    team = envelope.get("team_id")
    if not isinstance(event, Mapping) or not isinstance(team, str):
        raise BadRequest("an event_callback needs 'team_id' and 'event'")
    kind = event.get("type")
    item = event.get("item")
    user = event.get("user")
    if kind not in ("reaction_added", "reaction_removed") or not isinstance(item, Mapping):
        return None
    rating = _RATINGS.get(str(event.get("reaction") or "").partition("::")[0])
    channel, ts = item.get("channel"), item.get("ts")
    if rating is None or item.get("type") != "message" or not isinstance(user, str):
        return None
    if not (isinstance(channel, str) and isinstance(ts, str)):
        return None
    if bot_user is not None and (user == bot_user or event.get("item_user") != bot_user):
        return None
    added = kind == "reaction_added"
    return Reaction(
        platform="slack",
        workspace=team,
        channel=channel,
        user=user_id(user),
        message_id=ts,
        rating=rating,
        added=added,
        user_team=_sender_team(envelope, event, team),
        platform_event_id=f"react:{envelope.get('event_id') or event.get('event_ts')}",
    )


def _edited(
    envelope: Mapping[str, Any], event: Mapping[str, Any], bot_user: str | None
) -> MessageEdited | None:
    """A ``message_changed`` message event whose text changed (Slack sends one for a link
    preview too, with the same text: not an edit), read as the message it is now."""
    message, previous = event.get("message"), event.get("previous_message")
    if not isinstance(message, Mapping):
        return None
    if isinstance(previous, Mapping) and previous.get("text") == message.get("text"):
        return None
    now = {**message, "channel": event.get("channel"), "channel_type": event.get("channel_type")}
    parsed = parse_event({**envelope, "event": now}, bot_user=bot_user)
    if not isinstance(parsed, InboundMessage):
        return None
    return edited(parsed, event_id=f"edit:{parsed.channel}:{event.get('event_ts')}")


def _deleted(event: Mapping[str, Any], team: str) -> MessageDeleted | None:
    """A ``message_deleted`` message event: the message (``deleted_ts``) leaves the
    history if a person wrote it to the agent."""
    channel, gone = event.get("channel"), event.get("deleted_ts")
    if not (isinstance(channel, str) and isinstance(gone, str)):
        return None
    previous = event.get("previous_message")
    author = previous.get("user") if isinstance(previous, Mapping) else None
    return MessageDeleted(
        platform="slack",
        workspace=team,
        channel=channel,
        user=user_id(author) if isinstance(author, str) else "slack:?",
        message_id=gone,
        platform_event_id=f"delete:{channel}:{gone}",
    )


def parse_session_stop(envelope: Mapping[str, Any]) -> ButtonPress | None:
    """An ``agent_session_stopped`` envelope (someone pressed Slack's own Stop button on
    the agent's session in a thread) as a Stop press for the thread's current turn
    (``value`` None: whichever turn runs or waits there)."""
    event = envelope.get("event")
    team = envelope.get("team_id")
    if not isinstance(event, Mapping) or not isinstance(team, str):
        raise BadRequest("an event_callback needs 'team_id' and 'event'")
    channel, thread, user = event.get("channel"), event.get("thread_ts"), event.get("user")
    if not (isinstance(channel, str) and isinstance(user, str) and isinstance(thread, str)):
        return None
    streams = event.get("streaming_message_ts")
    return ButtonPress(
        platform="slack",
        workspace=team,
        channel=channel,
        thread=thread,
        user=user_id(user),
        action="stop",
        value=None,
        user_team=_sender_team(envelope, event, team),
        platform_event_id=f"stop:{envelope.get('event_id') or event.get('event_ts')}",
        raw={"session": True, "streams": list(streams) if isinstance(streams, list) else []},
    )


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
    if is_home(payload):
        if not isinstance(user.get("id"), str):
            raise BadRequest("a block_actions payload needs the user's id")
        return _home_press(payload, action, user)
    action_id = action.get("action_id")
    chosen = choice_action(action_id)
    if action_id not in ACTIONS and action_id not in JOB_ACTIONS and chosen is None:
        return None
    value = str(action.get("value") or "")
    if not isinstance(team, Mapping) or not isinstance(channel, Mapping):
        raise BadRequest("a block_actions payload needs 'team' and 'channel'")
    if not isinstance(message, Mapping):
        raise BadRequest("a block_actions payload's 'message' must be an object")
    ts = message.get("ts") or message.get("message_ts")
    thread = message.get("thread_ts")
    container = payload.get("container")
    response_url = str(payload.get("response_url") or "")
    shown = ts
    if isinstance(container, Mapping) and container.get("is_ephemeral") is True:
        # Only its response_url can redraw it; without one it cannot be redrawn at all.
        shown = f"{EPHEMERAL}{response_url}" if response_url.startswith("http") else None
    key = ConversationKey(
        platform="slack",
        workspace=str(team.get("id")),
        channel=str(channel.get("id")),
        thread=str(thread) if thread else None,
    )
    asked, _, option = value.partition(":")
    question = chosen in ("answer", "other")
    return ButtonPress(
        platform="slack",
        workspace=key.workspace,
        channel=key.channel,
        thread=key.thread,
        user=user_id(str(user.get("id"))),
        approval_id=value if action_id in ACTIONS else asked if question else None,
        action=ACTIONS.get(str(action_id)) or JOB_ACTIONS.get(str(action_id)) or chosen,  # type: ignore[arg-type]
        value=option if question else value,
        message=MessageRef(conversation=key, message_id=str(shown)) if shown else None,
        # The presser's own team (a Slack Connect guest's is not the channel's).
        user_team=str(user["team_id"]) if isinstance(user.get("team_id"), str) else "?",
        platform_event_id=f"act:{channel.get('id')}:{ts}:{action.get('action_ts')}:{user.get('id')}",
        raw={"response_url": response_url},
    )


def parse_command(form: Mapping[str, str]) -> InboundMessage:
    """A slash command as a text command message: a registry command's own (``/jobs``,
    ``/cancel ID``) or the umbrella ``/chatgate <command>``. One the registry does not know
    (a manifest from another version) is ``/help``, marked ``raw["unknown"]``."""
    for field in ("team_id", "channel_id", "user_id", "trigger_id"):
        if not form.get(field):
            raise BadRequest(f"a slash command needs {field!r}")
    words = (form.get("text") or "").strip()
    name = (form.get("command") or "/chatgate").strip().removeprefix("/").lower()
    raw: dict[str, JsonValue] = {"addressed": True, "command": name}
    if name == "chatgate":
        text = f"/{words}" if words else "/help"
    elif name not in BY_NAME:
        text = "/help"
        raw["unknown"] = True
    elif name == "forget" and not words:
        text = "/forget me"  # its one use; the question asks before anything is erased
    else:
        text = f"/{name} {words}".rstrip()
    return InboundMessage(
        platform="slack",
        workspace=form["team_id"],
        channel=form["channel_id"],
        user=user_id(form["user_id"]),
        text=text,
        platform_event_id=f"cmd:{form['trigger_id']}",
        raw=raw,
    )


def is_home(payload: Mapping[str, Any]) -> bool:
    """Was the button pressed in the App Home (a view, no channel)?"""
    container = payload.get("container")
    return isinstance(container, Mapping) and container.get("type") == "view"


def home_dm(payload: Mapping[str, Any]) -> str | None:
    """The person's DM with the app, as the App Home view keeps it (``private_metadata``)."""
    view = payload.get("view")
    if not isinstance(view, Mapping):
        return None
    try:
        kept = json.loads(str(view.get("private_metadata") or "{}"))
    except ValueError:
        return None
    dm = kept.get("dm") if isinstance(kept, dict) else None
    return dm if isinstance(dm, str) and dm.startswith("D") else None


def parse_home_forget(payload: Mapping[str, Any]) -> InboundMessage | None:
    """The App Home's "Forget me" as ``forget me`` typed in the person's DM with the app
    (None for any other press)."""
    actions, user, team = payload.get("actions"), payload.get("user"), payload.get("team")
    if not (isinstance(actions, list) and actions and isinstance(actions[0], Mapping)):
        raise BadRequest("a block_actions payload needs 'actions'")
    action = actions[0]
    if action.get("action_id") != HOME_FORGET:
        return None
    if not (isinstance(user, Mapping) and isinstance(user.get("id"), str)):
        raise BadRequest("a block_actions payload needs 'user'")
    team_id = team.get("id") if isinstance(team, Mapping) else user.get("team_id")
    dm = str(action.get("value") or "")
    if not isinstance(team_id, str) or not team_id or not dm.startswith("D"):
        raise BadRequest("the App Home's forget button needs a team and the DM")
    return InboundMessage(
        platform="slack",
        workspace=team_id,
        channel=dm,
        user=user_id(user["id"]),
        text="forget me",
        platform_event_id=f"home:forget:{user['id']}:{action.get('action_ts')}",
        user_team=str(user.get("team_id") or team_id),
        raw={"addressed": True},
    )


def _home_press(
    payload: Mapping[str, Any], action: Mapping[str, Any], user: Mapping[str, Any]
) -> ButtonPress | None:
    """A press in the App Home: an approval's button or a schedule's. There is no
    message; the conversation is the schedule's (from its block id) or, for an approval,
    the person's DM with the app (the decision does not need one)."""
    action_id = str(action.get("action_id"))
    block = str(action.get("block_id") or "").split(":")
    team = payload.get("team")
    team_id = team.get("id") if isinstance(team, Mapping) else user.get("team_id")
    if not isinstance(team_id, str) or not team_id:
        raise BadRequest("a block_actions payload needs 'team'")
    value = str(action.get("value") or "")
    if action_id in ACTIONS and block[0] == HOME_APPROVAL:
        key = ConversationKey(
            platform="slack", workspace=team_id, channel=home_dm(payload) or str(user["id"])
        )
    elif action_id in JOB_ACTIONS and block[0] == HOME_JOB and len(block) == 5:
        key = ConversationKey(
            platform="slack", workspace=block[2], channel=block[3], thread=block[4] or None
        )
    else:
        return None
    return ButtonPress(
        platform="slack",
        workspace=key.workspace,
        channel=key.channel,
        thread=key.thread,
        user=user_id(str(user["id"])),
        approval_id=value if action_id in ACTIONS else None,
        action=ACTIONS.get(action_id) or JOB_ACTIONS[action_id],
        value=value,
        user_team=str(user["team_id"]) if isinstance(user.get("team_id"), str) else "?",
        platform_event_id=f"act:home:{user['id']}:{action.get('action_ts')}",
        raw={"home": True},
    )


def check_request(body: object, *, form: Mapping[str, str] | None = None) -> None:
    """Raise ``BadRequest`` for a body Slack does not send, before bolt runs a listener on
    it (bolt answers a listener's exception with a 500): a press, an App Home event or a
    slash command that our parsers cannot read."""
    try:
        if form is not None and "payload" not in form:
            if form.get("command"):
                parse_command(form)
            return
        if not isinstance(body, Mapping):
            raise BadRequest("the body is not an object")
        if body.get("type") == "block_actions":
            actions = body.get("actions")
            if not isinstance(actions, list) or not all(
                isinstance(a, Mapping) and isinstance(a.get("action_id"), str) for a in actions
            ):
                raise BadRequest("block_actions needs actions, each with an action_id")
            if parse_home_forget(body) is None:
                parse_action(body)
        elif body.get("type") == "event_callback":
            event = body.get("event")
            if not isinstance(event, Mapping):
                raise BadRequest("an event_callback without an event object")
            # bolt reads these of any event before a listener runs.
            for field in ("channel", "user"):
                if field in event and not isinstance(event[field], str | Mapping | None):
                    raise BadRequest(f"an event's {field!r} is neither text nor an object")
            if event.get("type") == "app_home_opened" and not (
                isinstance(event.get("user"), str) and event["user"]
            ):
                raise BadRequest("app_home_opened needs 'user'")
            if event.get("type") == "agent_session_stopped":
                parse_session_stop(body)
    except (AttributeError, TypeError, KeyError, ValueError) as exc:
        raise BadRequest(f"not what Slack sends: {exc}") from exc


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

"""The built-in web chat: parse the JSON API's bodies, check who may use it, deliver replies.

For the web chat the database *is* the delivery medium: a reply is delivered once its
message row exists (the turn journals it before sending), so :class:`WebSender` only wakes
the browsers watching the conversation. Browsers also poll, so a reply written by another
gateway process still arrives.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import re
import uuid
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Literal, cast, get_args

from adapters.base import BadRequest, Forbidden, Unauthorized
from adapters.payloads import same_secret
from agent_core.approval_text import for_prompt
from agent_core.events import ApprovalPrompt, ConversationKey, Edit, InboundMessage, Reply
from agent_core.records import (
    ApprovalDecision,
    ApprovalRecord,
    ConversationRecord,
    MessageRecord,
)

WORKSPACE = "local"
MAX_TEXT = 32_000
_USER = re.compile(r"^[A-Za-z0-9_.@+-]{1,64}$")


def parse_message(body: object, *, event_id: str | None = None) -> InboundMessage:
    """Turn a ``POST /api/messages`` body into an inbound event, or raise BadRequest."""
    if not isinstance(body, Mapping):
        raise BadRequest("expected a JSON object")
    conversation = body.get("conversation")
    text = body.get("text")
    user = body.get("user", "local")
    client_id = body.get("id", event_id)
    if not isinstance(conversation, str) or not conversation.strip():
        raise BadRequest("'conversation' must be a non-empty string")
    if len(conversation) > 200:
        raise BadRequest("'conversation' must be at most 200 characters")
    if not isinstance(text, str) or not text.strip():
        raise BadRequest("'text' must be a non-empty string")
    if len(text) > MAX_TEXT:
        raise BadRequest(f"'text' must be at most {MAX_TEXT} characters")
    if not isinstance(user, str) or not _USER.match(user):
        raise BadRequest("'user' must be 1-64 letters, digits or _.@+-")
    if client_id is not None and (not isinstance(client_id, str) or not 0 < len(client_id) <= 128):
        raise BadRequest("'id' must be a string of 1-128 characters")
    return InboundMessage(
        platform="web",
        workspace=WORKSPACE,
        channel=conversation.strip(),
        user=f"web:{user}",
        text=text,
        platform_event_id=client_id or uuid.uuid4().hex,
    )


# Headers a proxy adds: with one in front, "loopback" says nothing about who is asking.
PROXY_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Real-IP", "Via")
SESSION_COOKIE = "chatgate_session"


def session_value(token: str) -> str:
    """What the sign-in cookie holds: derived from the token (not the token itself), so a
    new token ends every session."""
    return hmac.new(token.encode(), b"chatgate web session", hashlib.sha256).hexdigest()


def check_local(*, remote: str | None, host: str | None, headers: Mapping[str, str]) -> None:
    """Without a token: a loopback client, naming this machine, with no proxy between.

    The ``Host`` header must name this machine: a web page elsewhere that rebinds its own
    domain to 127.0.0.1 must not reach the chat from the user's browser. A proxy header
    means someone else's request arrived through a proxy on this machine."""
    if not is_loopback(remote):
        raise Forbidden("the web chat only answers on loopback unless CHATGATE_WEB_TOKEN is set")
    if not is_local_host(host):
        raise Forbidden("the web chat only answers to localhost names unless a token is set")
    if any(name in headers for name in PROXY_HEADERS):
        raise Forbidden("a request through a proxy needs CHATGATE_WEB_TOKEN to be set")


def check_token(*, bearer: str | None, cookie: str | None, token: str) -> None:
    """The token holder: ``Authorization: Bearer TOKEN`` (scripts) or the sign-in cookie
    (the page). Never from a URL."""
    if bearer is not None and same_secret(bearer, token):
        return
    if cookie is not None and same_secret(cookie, session_value(token)):
        return
    raise Unauthorized("a valid web chat token is required")


def check_same_origin(*, origin: str | None, host: str | None) -> None:
    """Refuse a state-changing request that a page on another origin sent from a browser."""
    if origin is None:
        return
    _scheme, _sep, rest = origin.partition("://")
    if not host or rest.lower() != host.lower():
        raise Forbidden(f"cross-origin request from {origin} refused")


def is_local_host(host: str | None) -> bool:
    """True when a Host header names this machine (localhost or a loopback address)."""
    if not host:
        return False
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    name = name.strip("[]").lower()
    return name == "localhost" or name.endswith(".localhost") or is_loopback(name)


def is_loopback(remote: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped loopback addresses."""
    if not remote:
        return False
    try:
        address = ipaddress.ip_address(remote.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def message_item(message: MessageRecord) -> dict[str, Any]:
    """A message as the JSON API shows it; approvals (and notes about them) carry their
    current state, so a page can draw the buttons or who decided."""
    item: dict[str, Any] = {
        "id": message.id,
        "role": message.role,
        "text": message.text,
        "author": message.author,
        "created_at": message.created_at.isoformat(),
    }
    if message.approval is not None:
        item["approval"] = approval_item(message.approval)
    if isinstance(message.payload, dict) and isinstance(message.payload.get("jobs"), list):
        item["jobs"] = message.payload["jobs"]
    return item


def approval_item(approval: ApprovalRecord) -> dict[str, Any]:
    """An approval as the JSON API shows it."""
    shown = for_prompt(approval.arguments)
    return {
        "id": approval.id,
        "kind": approval.kind,
        "tool": approval.tool,
        "arguments": approval.arguments,
        # What the page shows: the same honest text every platform's prompt shows.
        "shown": shown.text,
        "warning": shown.warning,
        "status": approval.status,
        "decided_by": approval.decided_by,
        "expires_at": approval.expires_at.isoformat(),
    }


def parse_decision(body: object) -> tuple[ApprovalDecision, str]:
    """A ``POST /api/approvals/{id}`` body: the decision and the web user deciding."""
    if not isinstance(body, Mapping):
        raise BadRequest("expected a JSON object")
    decision = body.get("decision")
    if decision not in get_args(ApprovalDecision):
        raise BadRequest(f"'decision' must be one of {', '.join(get_args(ApprovalDecision))}")
    user = body.get("user", "local")
    if not isinstance(user, str) or not _USER.match(user):
        raise BadRequest("'user' must be 1-64 letters, digits or _.@+-")
    return cast(ApprovalDecision, decision), f"web:{user}"


ScheduleVerb = Literal["pause", "resume", "delete"]


def parse_schedule_action(body: object) -> tuple[ScheduleVerb, str, int | None]:
    """A ``POST /api/schedules/{id}`` body: the action, the web user, and the ``jobs``
    listing (message id) the button was on, whose state is refreshed."""
    if not isinstance(body, Mapping):
        raise BadRequest("expected a JSON object")
    action = body.get("action")
    if action not in get_args(ScheduleVerb):
        raise BadRequest(f"'action' must be one of {', '.join(get_args(ScheduleVerb))}")
    user = body.get("user", "local")
    if not isinstance(user, str) or not _USER.match(user):
        raise BadRequest("'user' must be 1-64 letters, digits or _.@+-")
    message_id = body.get("message_id")
    if message_id is not None and (
        isinstance(message_id, bool)
        or not isinstance(message_id, int)
        or not 1 <= message_id < 2**63
    ):
        raise BadRequest("'message_id' must be a message id (1 to 2**63-1)")
    return cast(ScheduleVerb, action), f"web:{user}", message_id


def conversation_item(conversation: ConversationRecord) -> dict[str, Any]:
    """A conversation as the JSON API lists it."""
    return {
        "id": conversation.id,
        "name": conversation.key.channel,
        "platform": conversation.key.platform,
        "created_at": conversation.created_at.isoformat(),
        "updated_at": conversation.updated_at.isoformat(),
    }


class WebHub:
    """Wakes the streams watching a conversation when something new is stored in it."""

    def __init__(self) -> None:
        self._waiters: defaultdict[ConversationKey, set[asyncio.Event]] = defaultdict(set)

    def publish(self, conversation: ConversationKey) -> None:
        """Wake every stream of this conversation."""
        for waiter in self._waiters.get(conversation, ()):
            waiter.set()

    async def wait(self, conversation: ConversationKey, *, within: float) -> None:
        """Return when the conversation changes, or after ``within`` seconds."""
        waiter = asyncio.Event()
        self._waiters[conversation].add(waiter)
        try:
            async with asyncio.timeout(within):
                await waiter.wait()
        except TimeoutError:
            pass
        finally:
            self._waiters[conversation].discard(waiter)
            if not self._waiters[conversation]:
                del self._waiters[conversation]


class WebSender:
    """Delivers web replies: the row is already stored, so wake the conversation's streams."""

    def __init__(self, hub: WebHub) -> None:
        self._hub = hub

    async def send(self, reply: Reply | ApprovalPrompt) -> str:
        """Publish the reply to the streams; the receipt is the reply's delivery key."""
        self._hub.publish(reply.conversation)
        return f"web:{reply.idempotency_key}"

    async def edit(self, edit: Edit) -> None:
        """The decision is already stored beside the prompt: wake the streams."""
        self._hub.publish(edit.message.conversation)

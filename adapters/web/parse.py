"""The web chat's request bodies to events and decisions (pure)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any, Literal, cast, get_args

from adapters.base import BadRequest
from adapters.web.uploads import UPLOAD_ID
from agent_core.events import Attachment, InboundMessage, Rating
from agent_core.records import ApprovalDecision

WORKSPACE = "local"
MAX_TEXT = 32_000
_USER = re.compile(r"[A-Za-z0-9_.@+-]{1,64}")
ScheduleVerb = Literal["pause", "resume", "delete"]


def _web_user(body: Mapping[str, Any]) -> str:
    """The body's ``user`` (a label: every ``web:`` name is the one local principal) as
    chatgate names it, ``web:local`` when absent."""
    user = body.get("user", "local")
    if not isinstance(user, str) or not _USER.fullmatch(user):
        raise BadRequest("'user' must be 1-64 letters, digits or _.@+-")
    return f"web:{user}"


def parse_message(body: object, *, event_id: str | None = None) -> InboundMessage:
    """Turn a ``POST /api/messages`` body into an inbound event, or raise BadRequest."""
    if not isinstance(body, Mapping):
        raise BadRequest("expected a JSON object")
    conversation = body.get("conversation")
    text = body.get("text")
    user = _web_user(body)
    client_id = body.get("id", event_id)
    if not isinstance(conversation, str) or not conversation.strip():
        raise BadRequest("'conversation' must be a non-empty string")
    if len(conversation) > 200:
        raise BadRequest("'conversation' must be at most 200 characters")
    files = _attachments(body.get("attachments", []))
    if not isinstance(text, str) or not (text.strip() or files):
        raise BadRequest("'text' must be a non-empty string")
    if len(text) > MAX_TEXT:
        raise BadRequest(f"'text' must be at most {MAX_TEXT} characters")
    if client_id is not None and (not isinstance(client_id, str) or not 0 < len(client_id) <= 128):
        raise BadRequest("'id' must be a string of 1-128 characters")
    return InboundMessage(
        platform="web",
        workspace=WORKSPACE,
        channel=conversation.strip(),
        user=user,
        text=text if text.strip() else "(attachment)",
        platform_event_id=client_id or uuid.uuid4().hex,
        attachments=files,
    )


MAX_ATTACHMENTS = 10


def _attachments(value: object) -> tuple[Attachment, ...]:
    """``attachments``: uploads (``POST /api/uploads``) by id, with the names to show."""
    if not isinstance(value, list) or len(value) > MAX_ATTACHMENTS:
        raise BadRequest(f"'attachments' must be a list of at most {MAX_ATTACHMENTS} uploads")
    files = []
    for item in value:
        if not isinstance(item, Mapping):
            raise BadRequest("each attachment must be an object with 'id' and 'name'")
        upload_id, name = item.get("id"), item.get("name", "file")
        if not isinstance(upload_id, str) or UPLOAD_ID.fullmatch(upload_id) is None:
            raise BadRequest("an attachment's 'id' must be an upload id")
        if not isinstance(name, str) or not 0 < len(name) <= 255:
            raise BadRequest("an attachment's 'name' must be a string of 1-255 characters")
        files.append(Attachment(name=name, platform_file_id=upload_id))
    return tuple(files)


# Headers a proxy adds: with one in front, "loopback" says nothing about who is asking.


def parse_decision(body: object) -> tuple[ApprovalDecision, str]:
    """A ``POST /api/approvals/{id}`` body: the decision and the web user deciding."""
    if not isinstance(body, Mapping):
        raise BadRequest("expected a JSON object")
    decision = body.get("decision")
    if decision not in get_args(ApprovalDecision):
        raise BadRequest(f"'decision' must be one of {', '.join(get_args(ApprovalDecision))}")
    return cast(ApprovalDecision, decision), _web_user(body)


def parse_choice(body: object) -> tuple[str, str]:
    """A ``POST /api/choices/{id}`` body: the pressed button's value and the web user."""
    if not isinstance(body, Mapping):
        raise BadRequest("expected a JSON object")
    value = body.get("value")
    if not isinstance(value, str) or not 0 < len(value) <= 64:
        raise BadRequest("'value' must be the pressed button's value")
    return value, _web_user(body)


def parse_answer(body: object) -> tuple[str, str]:
    """A ``POST /api/questions/{id}`` body: ``{"choice": INDEX | "other", "user"?}``, the
    option pressed (its index, as text) and the web user."""
    if not isinstance(body, Mapping):
        raise BadRequest("expected a JSON object")
    choice = body.get("choice")
    if isinstance(choice, int) and not isinstance(choice, bool) and 0 <= choice < 100:
        choice = str(choice)
    if choice != "other" and not (
        isinstance(choice, str) and choice.isascii() and choice.isdigit() and len(choice) < 3
    ):
        raise BadRequest("'choice' must be an option's index or \"other\"")
    return str(choice), _web_user(body)


def parse_schedule_action(body: object) -> tuple[ScheduleVerb, str, int | None]:
    """A ``POST /api/schedules/{id}`` body: the action, the web user, and the ``jobs``
    listing (message id) the button was on, whose state is refreshed."""
    if not isinstance(body, Mapping):
        raise BadRequest("expected a JSON object")
    action = body.get("action")
    if action not in get_args(ScheduleVerb):
        raise BadRequest(f"'action' must be one of {', '.join(get_args(ScheduleVerb))}")
    user = _web_user(body)
    message_id = body.get("message_id")
    if message_id is not None and (
        isinstance(message_id, bool)
        or not isinstance(message_id, int)
        or not 1 <= message_id < 2**63
    ):
        raise BadRequest("'message_id' must be a message id (1 to 2**63-1)")
    return cast(ScheduleVerb, action), user, message_id


def parse_rating(body: object) -> tuple[int, Rating | None, str]:
    """A ``POST /api/feedback`` body: the rated message (our id), the rating (null takes
    it off) and the web user."""
    if not isinstance(body, Mapping):
        raise BadRequest("expected a JSON object")
    message_id = body.get("message_id")
    if (
        isinstance(message_id, bool)
        or not isinstance(message_id, int)
        or not 1 <= message_id < 2**63
    ):
        raise BadRequest("'message_id' must be a message id (1 to 2**63-1)")
    rating = body.get("rating")
    if rating not in get_args(Rating) and rating is not None:
        raise BadRequest("'rating' must be up, down or null")
    return message_id, cast(Rating | None, rating), _web_user(body)

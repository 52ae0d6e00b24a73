"""Messages, approvals and conversations as the web chat's JSON API shows them (pure)."""

from __future__ import annotations

from typing import Any

from agent_core import questions
from agent_core.approval_text import for_prompt
from agent_core.records import ApprovalRecord, ConversationRecord, MessageRecord


def message_item(
    message: MessageRecord, ratings: dict[int, dict[str, str]] | None = None
) -> dict[str, Any]:
    """A message as the JSON API shows it; approvals (and notes about them) carry their
    current state, so a page can draw the buttons or who decided. A reply of the agent's
    may be rated (``rateable``): ``ratings`` holds who rated it how, from ``ratings``."""
    item: dict[str, Any] = {
        "id": message.id,
        "role": message.role,
        "text": message.text,
        "author": message.author,
        "created_at": message.created_at.isoformat(),
    }
    if rateable(message):
        item["rateable"] = True
        item["ratings"] = (ratings or {}).get(message.id, {})
    if message.approval is not None:
        item["approval"] = approval_item(message.approval)
    if message.files:
        item["files"] = list(message.files)
    if isinstance(message.payload, dict) and isinstance(message.payload.get("jobs"), list):
        item["jobs"] = message.payload["jobs"]
    if isinstance(message.payload, dict) and isinstance(message.payload.get("choices"), list):
        item["choices"] = message.payload["choices"]
    sent = message.payload.get("file") if isinstance(message.payload, dict) else None
    if isinstance(sent, dict) and str(sent.get("receipt", "")).startswith("web-file:"):
        item["file"] = {
            "name": sent.get("name"),
            "size": sent.get("size"),
            "content_type": sent.get("content_type"),
            "url": f"/api/files/{message.id}",
        }
    return item


def rateable(message: MessageRecord) -> bool:
    """Whether the page offers 👍/👎 under it: a reply of the agent's to a turn."""
    return message.role == "assistant" and message.turn_id is not None


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
        "always_allow": approval.always_allow,
        # A question (``ask_user``): its options, and what it was answered.
        **(_question(approval) if approval.kind == "question" else {}),
    }


def _question(approval: ApprovalRecord) -> dict[str, Any]:
    asked = questions.asked(approval.arguments)
    return {
        "question": asked.text,
        "options": list(asked.options),
        "allow_other": asked.allow_other,
        "answer": approval.answer,
        "answering": approval.answering,
    }


def conversation_item(conversation: ConversationRecord) -> dict[str, Any]:
    """A conversation as the JSON API lists it."""
    return {
        "id": conversation.id,
        "name": conversation.key.channel,
        "platform": conversation.key.platform,
        "created_at": conversation.created_at.isoformat(),
        "updated_at": conversation.updated_at.isoformat(),
    }

"""The event schema: every event survives a JSON round trip unchanged."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from agent_core.events import (
    ApprovalPrompt,
    Attachment,
    ButtonPress,
    ConversationKey,
    Edit,
    Event,
    InboundMessage,
    MessageRef,
    Reaction,
    Reply,
    event_from_json,
    event_to_json,
)

WHEN = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
WHERE = ConversationKey(platform="slack", workspace="T1", channel="C1", thread="1700.1")

EVENTS: list[Event] = [
    InboundMessage(
        platform="telegram",
        workspace="bot",
        channel="-100",
        thread="7",
        user="telegram:42",
        text="hello ✓",
        mentions=("bot",),
        attachments=(
            Attachment(
                name="a.png", mime_type="image/png", size=3, url=None, platform_file_id="F1"
            ),
        ),
        reply_to="99",
        platform_event_id="u-1",
        received_at=WHEN,
        raw={"update_id": 1, "nested": {"list": [1, "x", None, True]}},
    ),
    ButtonPress(
        platform="discord",
        workspace="G",
        channel="D",
        user="discord:1",
        approval_id="ap_1",
        action="approve",
        message=MessageRef(conversation=WHERE, message_id="m1"),
        platform_event_id="i-1",
        received_at=WHEN,
    ),
    Reaction(
        platform="slack",
        workspace="T1",
        channel="C1",
        user="slack:U1",
        message_id="1700.2",
        rating="down",
        added=False,
        platform_event_id="react:Ev1",
        received_at=WHEN,
    ),
    Reply(conversation=WHERE, text="**hi**", reply_to="1700.1", idempotency_key="5:2"),
    ApprovalPrompt(
        conversation=WHERE,
        approval_id="ap_1",
        tool="run_command",
        arguments={"command": "ls -la"},
        requested_by="slack:U1",
        idempotency_key="5:3",
    ),
    Edit(
        message=MessageRef(conversation=WHERE, message_id="m1"),
        text="approved by U1",
        idempotency_key="5:4",
    ),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_every_event_round_trips_through_json(event: Event) -> None:
    """Serialising and parsing gives an equal event of the same class."""
    back = event_from_json(event_to_json(event))
    assert type(back) is type(event)
    assert back == event


def test_every_event_kind_is_covered() -> None:
    """The round-trip list holds one of each event type (a new type needs a case)."""
    kinds = {type(e).__name__ for e in EVENTS}
    assert kinds == {
        "InboundMessage",
        "ButtonPress",
        "Reaction",
        "Reply",
        "ApprovalPrompt",
        "Edit",
    }


def test_conversation_key_is_derived_from_platform_workspace_channel_thread() -> None:
    """Two messages in the same thread share a conversation; another thread does not."""
    a = InboundMessage(
        platform="slack",
        workspace="T",
        channel="C",
        thread="1",
        user="u",
        text="x",
        platform_event_id="1",
    )
    b = InboundMessage(
        platform="slack",
        workspace="T",
        channel="C",
        thread="1",
        user="v",
        text="y",
        platform_event_id="2",
    )
    c = InboundMessage(
        platform="slack",
        workspace="T",
        channel="C",
        thread="2",
        user="u",
        text="x",
        platform_event_id="3",
    )
    assert a.conversation == b.conversation != c.conversation
    assert str(a.conversation) == "slack:T:C:1"


def test_unknown_kind_is_rejected() -> None:
    """A payload with an unknown kind is an error, not a silent default."""
    with pytest.raises(ValidationError):
        event_from_json('{"kind": "mystery"}')

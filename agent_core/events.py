"""The common event schema: what adapters produce and consume, and nothing else.

Inbound events (``InboundMessage``, ``ButtonPress``) come from a platform; outbound events
(``Reply``, ``ApprovalPrompt``, ``Edit``) go to one. Every event is a frozen dataclass with
a ``kind`` discriminator and round-trips through JSON with :func:`event_to_json` /
:func:`event_from_json`, so events can be journaled, queued and replayed without the
platform SDK objects they came from.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import Field, JsonValue, TypeAdapter

Platform: TypeAlias = Literal["slack", "discord", "telegram", "web"]
PLATFORMS: tuple[Platform, ...] = ("slack", "discord", "telegram", "web")


def utcnow() -> datetime:
    """Return the current time as an aware UTC datetime."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationKey:
    """Where a conversation lives: one per (platform, workspace, channel, thread)."""

    platform: Platform
    workspace: str
    channel: str
    thread: str | None = None

    def __str__(self) -> str:
        parts = [self.platform, self.workspace, self.channel]
        if self.thread is not None:
            parts.append(self.thread)
        return ":".join(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageRef:
    """A message already on a platform (to reply to, or to edit)."""

    conversation: ConversationKey
    message_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Attachment:
    """A file that came with a message; fetched lazily by whoever needs its bytes."""

    name: str
    mime_type: str | None = None
    size: int | None = None
    url: str | None = None
    platform_file_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class _FromPlatform:
    """What every event a platform sends carries: where, who, and the ledger key."""

    platform: Platform
    workspace: str
    channel: str
    thread: str | None = None
    user: str
    platform_event_id: str
    received_at: datetime = field(default_factory=utcnow)
    raw: dict[str, JsonValue] = field(default_factory=dict)
    # The person's own workspace where the platform says which it is (Slack: a Slack
    # Connect guest's team differs from the channel's); None: the conversation's.
    user_team: str | None = None

    @property
    def conversation(self) -> ConversationKey:
        """The conversation this event belongs to."""
        return ConversationKey(
            platform=self.platform,
            workspace=self.workspace,
            channel=self.channel,
            thread=self.thread,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Quote:
    """The message a message replies to or quotes, as the platform sent it along: its
    words (the quoted part, when the person quoted a part) and who wrote them
    (``platform:user``, or ``assistant`` for the agent's own)."""

    text: str
    author: str
    message_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class InboundMessage(_FromPlatform):
    """A person wrote something the agent should answer.

    ``reply_to`` is the platform's id for the message a reply should answer (normally this
    message itself: Slack ``ts``, Telegram ``message_id``); ``platform_event_id`` is what the
    ingress ledger dedupes on.
    """

    kind: Literal["message"] = "message"
    text: str
    # The message it replies to or quotes (the model sees it with this one).
    quote: Quote | None = None
    mentions: tuple[str, ...] = ()
    attachments: tuple[Attachment, ...] = ()
    reply_to: str | None = None


ButtonAction: TypeAlias = Literal[
    # An approval's buttons.
    "approve",
    "allow_conversation",
    "deny",
    # A ``jobs`` listing's buttons, one schedule each.
    "pause",
    "resume",
    "delete",
    # A reply shown as it is written: stop its turn (``value`` is the turn's id).
    "stop",
    # ``forget me``'s confirmation: ``value`` says erase or keep, for whom, asked when.
    "forget",
    # An ``ask_user`` question's buttons: ``value`` is the option's index; "other" means
    # the presser's next message is the answer.
    "answer",
    "other",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ButtonPress(_FromPlatform):
    """A person pressed a button we rendered (an approval, or another action)."""

    kind: Literal["button"] = "button"
    approval_id: str | None = None
    action: ButtonAction
    # What the button acts on when it is not an approval (a schedule id for pause ...).
    value: str | None = None
    message: MessageRef | None = None


Rating: TypeAlias = Literal["up", "down"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Reaction(_FromPlatform):
    """A person put a 👍 or 👎 on a message (``added``), or took it off.

    ``message_id`` is the platform's id of the message reacted to; ``thread`` is None
    where the platform does not say which thread it is in (Slack, Telegram): the message
    is found in any thread of ``channel``. Other emojis never become a ``Reaction``.
    """

    kind: Literal["reaction"] = "reaction"
    message_id: str
    rating: Rating
    added: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """Text from the agent to a conversation; ``idempotency_key`` makes a resend safe."""

    kind: Literal["reply"] = "reply"
    conversation: ConversationKey
    text: str
    reply_to: str | None = None
    idempotency_key: str
    # Structured content a platform may render richer than ``text`` (the ``jobs``
    # listing with its buttons); ``text`` always says the same in words.
    payload: dict[str, JsonValue] | None = None
    # An earlier attempt may have sent it already (its intent is journaled, its receipt
    # is not): a platform that can look its deliveries up does so before sending again.
    resend: bool = False
    # Message ids of the leading chunks an earlier attempt journaled as sent (platforms
    # with no lookup report chunks as they go): a resend starts after them.
    delivered: tuple[str, ...] = ()
    # The message the reply was shown in while it was written (``Outbound.live``): the
    # reply goes into it (its first chunk), and it is the receipt.
    live_message: str | None = None
    # Only this person (``platform:user_id``) should see it, where the platform can do
    # that (Slack's ephemeral messages, Discord's ephemeral answer to the interaction the
    # command came from); elsewhere it is an ordinary message.
    private_to: str | None = None
    # The ``platform_event_id`` of the message (a slash command, an interaction) it
    # answers: a platform that answers an interaction in place finds it by this.
    answers: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalPrompt:
    """Ask for permission to run a tool, rendered as native buttons."""

    kind: Literal["approval_prompt"] = "approval_prompt"
    conversation: ConversationKey
    approval_id: str
    tool: str
    arguments: dict[str, JsonValue]
    requested_by: str
    reply_to: str | None = None
    idempotency_key: str
    # As for ``Reply``: an earlier attempt may have sent this prompt already.
    resend: bool = False
    # Not "may this run?" but "run it again?": the call was cut off by a crash and may or
    # may not have happened (its tool cannot tell). Shown with Retry and Skip.
    recovery: bool = False
    # Whether "Allow in this conversation" is offered (else Approve and Deny only).
    always_allow: bool = True
    # Not an approval but the model's question (``ask_user``): one button per option.
    question: Question | None = None
    # A copy in an approver's DM: the conversation the call was asked for in.
    origin: ConversationKey | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Question:
    """What ``ask_user`` asks: the question, its options (a button each), and whether
    "Other" is offered (the person's next message there is then the answer)."""

    text: str
    options: tuple[str, ...]
    allow_other: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class OutgoingFile:
    """A file the agent sends to a conversation (``send_file``), with a caption.

    ``idempotency_key`` is the tool call's: a platform that can tell a file it already
    delivered (by a nonce, or by looking) delivers it once however often it is asked."""

    kind: Literal["file"] = "file"
    conversation: ConversationKey
    name: str
    data: bytes = field(repr=False)
    content_type: str
    caption: str | None = None
    idempotency_key: str
    # An earlier attempt may have sent it already: look before sending again.
    resend: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Edit:
    """Replace the text of a message we sent (e.g. an approval prompt once decided)."""

    kind: Literal["edit"] = "edit"
    message: MessageRef
    text: str
    idempotency_key: str
    payload: dict[str, JsonValue] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageDeleted(_FromPlatform):
    """A person deleted a message of theirs (``message_id``, the platform's id): it
    leaves the history the model sees, and so do the memories drawn from its turn."""

    kind: Literal["deleted"] = "deleted"
    message_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageEdited(_FromPlatform):
    """A person edited a message of theirs (``message_id``, the platform's) to ``text``:
    a turn it opened that has not started reads the new text; during its turn the edit
    is a message of its own, which the busy mode takes (``steer`` adds it); later, the
    history notes it."""

    kind: Literal["edited"] = "edited"
    message_id: str
    text: str


def edited(message: InboundMessage, *, event_id: str) -> MessageEdited:
    """An edit, from the message as its platform now sends it (parsed like a new one)."""
    return MessageEdited(
        platform=message.platform,
        workspace=message.workspace,
        channel=message.channel,
        thread=message.thread,
        user=message.user,
        user_team=message.user_team,
        message_id=message.reply_to or "",
        text=message.text,
        platform_event_id=event_id,
    )


InboundEvent: TypeAlias = InboundMessage | ButtonPress | Reaction | MessageDeleted | MessageEdited
OutboundEvent: TypeAlias = Reply | ApprovalPrompt | Edit
Event: TypeAlias = InboundEvent | OutboundEvent


@functools.cache
def _adapter() -> TypeAdapter[Any]:
    return TypeAdapter(Annotated[Event, Field(discriminator="kind")])


def event_to_json(event: Event) -> str:
    """Serialize any event to JSON text (datetimes as ISO-8601 with offset)."""
    return _adapter().dump_json(event).decode()


def event_from_json(text: str | bytes) -> Event:
    """Parse JSON text produced by :func:`event_to_json` back into the same event.

    Raises ``pydantic.ValidationError`` when the text is not a valid event.
    """
    event: Event = _adapter().validate_json(text)
    return event

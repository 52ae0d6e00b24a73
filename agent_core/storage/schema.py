"""The tables. Migrations in ``migrations/versions`` create exactly these."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# SQLite only auto-increments INTEGER PRIMARY KEY; PostgreSQL gets a 64-bit identity.
Id = BigInteger().with_variant(Integer(), "sqlite")


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on every backend (SQLite stores them naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTCDateTime column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


conversations = Table(
    "conversations",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("platform", String(16), nullable=False),
    Column("workspace", String(255), nullable=False),
    Column("channel", String(255), nullable=False),
    # '' when the conversation is not a thread, so the unique key also covers it.
    Column("thread", String(255), nullable=False, default=""),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Column("lease_owner", String(128)),
    Column("lease_expires_at", UTCDateTime()),
    # `new` starts afresh: the model sees history after this message only.
    Column("history_from", Id),
    UniqueConstraint("platform", "workspace", "channel", "thread", name="uq_conversations_key"),
    Index("ix_conversations_platform_updated", "platform", "updated_at"),
)

messages = Table(
    "messages",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("conversation_id", String(32), ForeignKey("conversations.id"), nullable=False),
    Column("role", String(16), nullable=False),
    Column("text", Text, nullable=False),
    Column("author", String(255)),
    Column("turn_id", Id),
    # Set for messages the agent sends: makes a resend after a crash a no-op.
    Column("delivery_key", String(128), unique=True),
    Column("platform_message_id", String(255)),
    # For role "approval" (the prompt) and the note saying who decided it.
    Column("approval_id", String(32)),
    Column("created_at", UTCDateTime(), nullable=False),
    Index("ix_messages_conversation_id_id", "conversation_id", "id"),
    Index("ix_messages_conversation_turn", "conversation_id", "turn_id"),
    Index("ix_messages_turn_id", "turn_id"),
)

ingress = Table(
    "ingress",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("platform", String(16), nullable=False),
    Column("event_id", String(255), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("conversation_id", String(32), ForeignKey("conversations.id"), nullable=False),
    Column("message_id", Id, ForeignKey("messages.id")),
    Column("turn_id", Id),
    Column("payload", Text, nullable=False),
    Column("received_at", UTCDateTime(), nullable=False),
    UniqueConstraint("platform", "event_id", name="uq_ingress_platform_event"),
)

turns = Table(
    "turns",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("conversation_id", String(32), ForeignKey("conversations.id"), nullable=False),
    Column("user_id", String(255), nullable=False),
    Column("reply_to", String(255)),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("error", Text),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("started_at", UTCDateTime()),
    Column("finished_at", UTCDateTime()),
    Index("ix_turns_conversation_status", "conversation_id", "status", "id"),
    Index("ix_turns_status", "status"),
)

turn_steps = Table(
    "turn_steps",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("turn_id", Id, ForeignKey("turns.id"), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("status", String(16), nullable=False),
    Column("input", JSON),
    Column("output", JSON),
    Column("idempotency_key", String(64), nullable=False, unique=True),
    Column("started_at", UTCDateTime(), nullable=False),
    Column("finished_at", UTCDateTime()),
    UniqueConstraint("turn_id", "seq", name="uq_turn_steps_turn_seq"),
)

approvals = Table(
    "approvals",
    metadata,
    # Opaque and short: fits Telegram's 64-byte callback data with room to spare.
    Column("id", String(32), primary_key=True),
    Column("turn_id", Id, ForeignKey("turns.id"), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("conversation_id", String(32), ForeignKey("conversations.id"), nullable=False),
    # "tool": may this call run?  "recovery": re-run a call whose outcome is unknown?
    Column("kind", String(16), nullable=False),
    Column("tool", String(128), nullable=False),
    Column("arguments", JSON, nullable=False),
    Column("requested_by", String(255), nullable=False),
    Column("approvers", JSON, nullable=False),
    # pending -> approved | allowed (for the conversation) | denied | expired
    Column("status", String(16), nullable=False),
    Column("decided_by", String(255)),
    Column("decided_at", UTCDateTime()),
    Column("expires_at", UTCDateTime(), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    UniqueConstraint("turn_id", "seq", name="uq_approvals_turn_seq"),
    Index("ix_approvals_status_expires", "status", "expires_at"),
)

grants = Table(
    "grants",
    metadata,
    Column("conversation_id", String(32), ForeignKey("conversations.id"), primary_key=True),
    Column("tool", String(128), primary_key=True),
    Column("granted_by", String(255), nullable=False),
    Column("approval_id", String(32)),
    Column("created_at", UTCDateTime(), nullable=False),
)

pairing_requests = Table(
    "pairing_requests",
    metadata,
    Column("code", String(16), primary_key=True),
    Column("platform", String(16), nullable=False),
    Column("user_id", String(255), nullable=False),
    Column("conversation_id", String(32), ForeignKey("conversations.id"), nullable=False),
    # pending -> approved | expired
    Column("status", String(16), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False),
    Column("decided_by", String(255)),
    Column("decided_at", UTCDateTime()),
    Index("ix_pairing_requests_platform_status", "platform", "status"),
    Index("ix_pairing_requests_user_status", "user_id", "status"),
)

paired_users = Table(
    "paired_users",
    metadata,
    Column("user_id", String(255), primary_key=True),
    Column("approved_by", String(255), nullable=False),
    Column("approved_at", UTCDateTime(), nullable=False),
    Column("code", String(16)),
    Column("revoked_by", String(255)),
    Column("revoked_at", UTCDateTime()),
)

access_events = Table(
    "access_events",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("at", UTCDateTime(), nullable=False),
    Column("actor", String(255), nullable=False),
    # approve | revoke
    Column("action", String(16), nullable=False),
    Column("user_id", String(255), nullable=False),
    Column("code", String(16)),
)

"""audit_log: the append-only record the console shows; indexes the console reads by

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column("id", _ID, primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("subject", sa.String(255)),
        sa.Column("conversation_id", sa.String(32)),
        sa.Column("turn_id", _ID),
        sa.Column("detail", sa.JSON()),
    )
    op.create_index("ix_audit_log_at", "audit_log", ["at"])
    op.create_index("ix_audit_log_subject", "audit_log", ["subject"])
    op.create_index("ix_audit_log_action_id", "audit_log", ["action", "id"])
    op.create_index("ix_conversations_updated_at", "conversations", ["updated_at"])
    op.create_index("ix_turns_user_id", "turns", ["user_id"])
    op.create_index("ix_turns_created_at", "turns", ["created_at"])
    op.create_index("ix_messages_author", "messages", ["author"])
    op.create_index("ix_messages_created_at", "messages", ["created_at"])
    op.create_index("ix_schedules_created_by", "schedules", ["created_by"])
    op.create_index("ix_approvals_requested_by", "approvals", ["requested_by"])
    op.create_index("ix_ingress_turn_id", "ingress", ["turn_id"])


def downgrade() -> None:
    for name, table in (
        ("ix_ingress_turn_id", "ingress"),
        ("ix_approvals_requested_by", "approvals"),
        ("ix_schedules_created_by", "schedules"),
        ("ix_messages_created_at", "messages"),
        ("ix_messages_author", "messages"),
        ("ix_turns_created_at", "turns"),
        ("ix_turns_user_id", "turns"),
        ("ix_conversations_updated_at", "conversations"),
    ):
        op.drop_index(name, table_name=table)
    op.drop_table("audit_log")

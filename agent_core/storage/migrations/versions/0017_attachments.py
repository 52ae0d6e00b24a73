"""attachments: the files that came with messages, fetched when a turn needs them

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "attachments",
        sa.Column("id", _ID, primary_key=True),
        sa.Column("message_id", _ID, sa.ForeignKey("messages.id"), nullable=False),
        sa.Column(
            "conversation_id", sa.String(32), sa.ForeignKey("conversations.id"), nullable=False
        ),
        sa.Column("turn_id", _ID),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("declared_type", sa.String(255)),
        sa.Column("declared_size", sa.BigInteger()),
        sa.Column("url", sa.Text()),
        sa.Column("platform_file_id", sa.String(255)),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("sha256", sa.String(64)),
        sa.Column("content_type", sa.String(255)),
        sa.Column("size", sa.BigInteger()),
        sa.Column("error", sa.Text()),
        sa.Column("transcript", sa.Text()),
        sa.Column("stored_at", sa.DateTime(timezone=True)),
    )
    op.create_index("ix_attachments_turn_id", "attachments", ["turn_id"])
    op.create_index("ix_attachments_message_id", "attachments", ["message_id"])
    op.create_index("ix_attachments_sha256", "attachments", ["sha256"])


def downgrade() -> None:
    op.drop_table("attachments")

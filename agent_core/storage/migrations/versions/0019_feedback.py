"""feedback: 👍/👎 on the agent's replies, and the index a reaction finds its message by

Revision ID: 0019
Revises: 0018
Create Date: 2027-01-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "feedback",
        sa.Column("id", _ID, primary_key=True),
        sa.Column("turn_id", _ID, sa.ForeignKey("turns.id"), nullable=False),
        sa.Column(
            "conversation_id", sa.String(32), sa.ForeignKey("conversations.id"), nullable=False
        ),
        sa.Column("message_id", _ID, sa.ForeignKey("messages.id")),
        sa.Column("user_id", sa.String(255), nullable=False),
        sa.Column("rating", sa.String(8), nullable=False),
        sa.Column("comment", sa.Text()),
        sa.Column("asked_at", sa.DateTime(timezone=True)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("turn_id", "user_id", name="uq_feedback_turn_user"),
    )
    op.create_index("ix_feedback_rating_turn", "feedback", ["rating", "turn_id"])
    op.create_index("ix_feedback_conversation_id", "feedback", ["conversation_id"])
    op.create_index("ix_feedback_user_id", "feedback", ["user_id"])
    op.create_index("ix_messages_platform_message_id", "messages", ["platform_message_id"])


def downgrade() -> None:
    op.drop_index("ix_messages_platform_message_id", table_name="messages")
    op.drop_table("feedback")

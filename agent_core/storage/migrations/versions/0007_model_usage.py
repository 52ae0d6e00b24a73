"""model spend per call, for budgets and the usage command

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "model_usage",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("conversation_id", sa.String(length=32), nullable=False),
        sa.Column("turn_id", _ID, nullable=False),
        sa.Column("model", sa.String(length=255), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversations.id"]),
        sa.ForeignKeyConstraint(["turn_id"], ["turns.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_model_usage_user_id_day", "model_usage", ["user_id", "day"])
    op.create_index("ix_model_usage_conversation_id", "model_usage", ["conversation_id"])
    op.create_index("ix_model_usage_day", "model_usage", ["day"])
    op.create_index("ix_model_usage_turn_id", "model_usage", ["turn_id"])


def downgrade() -> None:
    op.drop_table("model_usage")

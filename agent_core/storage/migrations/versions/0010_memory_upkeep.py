"""memory upkeep: extraction and maintenance jobs, reviewed facts, maintenance slots

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

_TS = sa.DateTime(timezone=True)

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Maintenance jobs belong to a person, not to a turn or a conversation.
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.alter_column("turn_id", existing_type=sa.BigInteger(), nullable=True)
        batch_op.alter_column("conversation_id", existing_type=sa.String(32), nullable=True)
        batch_op.add_column(sa.Column("user_id", sa.String(255), nullable=True))
    # ... and so is their spend.
    with op.batch_alter_table("model_usage", schema=None) as batch_op:
        batch_op.alter_column("turn_id", existing_type=sa.BigInteger(), nullable=True)
        batch_op.alter_column("conversation_id", existing_type=sa.String(32), nullable=True)
    # A plain ADD COLUMN: rebuilding ``memories`` would drop its full-text triggers.
    op.add_column("memories", sa.Column("reviewed_at", _TS, nullable=True))
    op.create_index(
        "ix_memories_unreviewed",
        "memories",
        ["user_id"],
        sqlite_where=sa.text("reviewed_at IS NULL"),
        postgresql_where=sa.text("reviewed_at IS NULL"),
    )
    op.create_table(
        "maintenance",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("last_slot", _TS, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("maintenance")
    op.drop_index("ix_memories_unreviewed", table_name="memories")
    op.drop_column("memories", "reviewed_at")
    op.execute("DELETE FROM model_usage WHERE turn_id IS NULL")
    with op.batch_alter_table("model_usage", schema=None) as batch_op:
        batch_op.alter_column("conversation_id", existing_type=sa.String(32), nullable=False)
        batch_op.alter_column("turn_id", existing_type=sa.BigInteger(), nullable=False)
    op.execute("DELETE FROM jobs WHERE turn_id IS NULL")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("user_id")
        batch_op.alter_column("conversation_id", existing_type=sa.String(32), nullable=False)
        batch_op.alter_column("turn_id", existing_type=sa.BigInteger(), nullable=False)

"""history_from for the new command

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:

    with op.batch_alter_table("conversations", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "history_from", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
            )
        )


def downgrade() -> None:

    with op.batch_alter_table("conversations", schema=None) as batch_op:
        batch_op.drop_column("history_from")

"""reminders: what a schedule does at each slot, "agent" (a turn: the model answers its
prompt) or "message" (its text is posted as it is, no model call)

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("action", sa.String(16), nullable=False, server_default="agent"))


def downgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("action")

"""turn stalls: attempts that ended where the previous one did, the poison guard's count

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.add_column(sa.Column("stalls", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("stalled_at", sa.Integer()))


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("stalled_at")
        batch.drop_column("stalls")

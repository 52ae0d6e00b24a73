"""live messages and stops: the platform message a turn's reply is shown in while it is
written, and who asked the turn to stop

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.add_column(sa.Column("live_message", sa.String(255)))
        batch.add_column(sa.Column("stop_requested_by", sa.String(255)))


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("stop_requested_by")
        batch.drop_column("live_message")

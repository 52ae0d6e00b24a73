"""turn controls: the platform message a turn's reply is shown in while it is written, who
asked the turn to stop, the turn another one took in (busy modes), and a conversation's
busy mode

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
        batch.add_column(
            sa.Column("merged_into", sa.BigInteger().with_variant(sa.Integer(), "sqlite"))
        )
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("busy_mode", sa.String(16)))


def downgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("busy_mode")
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("merged_into")
        batch.drop_column("stop_requested_by")
        batch.drop_column("live_message")

"""turn marks: the state shown on a turn's message (a reaction), so the next mark replaces
it, in whichever process and after a restart

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.add_column(sa.Column("marked", sa.String(16)))


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("marked")

"""profile pins: the profile and the model an admin chose for a conversation
(``/profile NAME``, ``/model NAME``)

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("profile", sa.String(64)))
        batch.add_column(sa.Column("model", sa.String(255)))


def downgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("model")
        batch.drop_column("profile")

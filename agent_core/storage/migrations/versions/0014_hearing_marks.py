"""hearing marks: until when a platform's session was known to hear, for catching up

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hearing_marks",
        sa.Column("platform", sa.String(16), primary_key=True),
        sa.Column("heard_until", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("hearing_marks")

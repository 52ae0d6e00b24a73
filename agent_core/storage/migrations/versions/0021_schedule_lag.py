"""schedule lag and jitter: each run's planned start (its slot, or its slot plus the
schedule's jitter) and when its turn first started; a schedule's jitter window; the
dispatcher's and the embedded runners' last sign of life (for ``chatgate doctor``)

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(
            sa.Column("jitter_seconds", sa.Integer(), nullable=False, server_default="0")
        )
    with op.batch_alter_table("schedule_runs") as batch:
        batch.add_column(sa.Column("due_at", sa.DateTime(timezone=True)))
        batch.add_column(sa.Column("started_at", sa.DateTime(timezone=True)))
    op.create_index("ix_schedule_runs_started_at", "schedule_runs", ["started_at"])
    op.create_table(
        "beats",
        sa.Column("role", sa.String(16), primary_key=True),
        sa.Column("owner", sa.String(128), primary_key=True),
        sa.Column("beat_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("beats")
    op.drop_index("ix_schedule_runs_started_at", table_name="schedule_runs")
    with op.batch_alter_table("schedule_runs") as batch:
        batch.drop_column("started_at")
        batch.drop_column("due_at")
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("jitter_seconds")

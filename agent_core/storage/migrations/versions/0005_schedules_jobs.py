"""schedules, their runs, the job table, queued turns

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("turns", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("lane", sa.String(length=16), server_default="inline", nullable=False)
        )
        batch_op.add_column(sa.Column("prompt", sa.Text(), nullable=True))
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.add_column(sa.Column("payload", sa.JSON(), nullable=True))
    op.create_table(
        "schedules",
        sa.Column("id", sa.String(length=16), nullable=False),
        sa.Column("conversation_id", sa.String(length=32), nullable=False),
        sa.Column("created_by", sa.String(length=255), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("spec", sa.String(length=255), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("anchor", sa.DateTime(timezone=True), nullable=True),
        sa.Column("missed", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("next_run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("creation_key", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_schedules_conversation_id_conversations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_schedules")),
        sa.UniqueConstraint("creation_key", name=op.f("uq_schedules_creation_key")),
    )
    op.create_index(
        "ix_schedules_status_next_run_at", "schedules", ["status", "next_run_at"], unique=False
    )
    op.create_index("ix_schedules_conversation_id", "schedules", ["conversation_id"], unique=False)
    op.create_table(
        "schedule_targets",
        sa.Column("schedule_id", sa.String(length=16), nullable=False),
        sa.Column("conversation_id", sa.String(length=32), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_schedule_targets_conversation_id_conversations"),
        ),
        sa.ForeignKeyConstraint(
            ["schedule_id"],
            ["schedules.id"],
            name=op.f("fk_schedule_targets_schedule_id_schedules"),
        ),
        sa.PrimaryKeyConstraint("schedule_id", "conversation_id", name=op.f("pk_schedule_targets")),
    )
    op.create_index(
        "ix_schedule_targets_conversation_id",
        "schedule_targets",
        ["conversation_id"],
        unique=False,
    )
    op.create_table(
        "schedule_runs",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("schedule_id", sa.String(length=16), nullable=False),
        sa.Column("scheduled_for", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["schedule_id"],
            ["schedules.id"],
            name=op.f("fk_schedule_runs_schedule_id_schedules"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_schedule_runs")),
        sa.UniqueConstraint("schedule_id", "scheduled_for", name="uq_schedule_runs_slot"),
    )
    op.create_table(
        "jobs",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("turn_id", Id, nullable=False),
        sa.Column("conversation_id", sa.String(length=32), nullable=False),
        sa.Column("schedule_id", sa.String(length=16), nullable=True),
        sa.Column("run_id", Id, nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("not_before", sa.DateTime(timezone=True), nullable=False),
        sa.Column("enqueued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_owner", sa.String(length=128), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("receipt", sa.String(length=255), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_jobs_conversation_id_conversations"),
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["schedule_runs.id"], name=op.f("fk_jobs_run_id_schedule_runs")
        ),
        sa.ForeignKeyConstraint(
            ["schedule_id"], ["schedules.id"], name=op.f("fk_jobs_schedule_id_schedules")
        ),
        sa.ForeignKeyConstraint(["turn_id"], ["turns.id"], name=op.f("fk_jobs_turn_id_turns")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    op.create_index("ix_jobs_status_not_before", "jobs", ["status", "not_before"], unique=False)
    op.create_index("ix_jobs_schedule_id_id", "jobs", ["schedule_id", "id"], unique=False)
    op.create_index("ix_jobs_turn_id", "jobs", ["turn_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_jobs_turn_id", table_name="jobs")
    op.drop_index("ix_jobs_schedule_id_id", table_name="jobs")
    op.drop_index("ix_jobs_status_not_before", table_name="jobs")
    op.drop_table("jobs")
    op.drop_table("schedule_runs")
    op.drop_index("ix_schedule_targets_conversation_id", table_name="schedule_targets")
    op.drop_table("schedule_targets")
    op.drop_index("ix_schedules_conversation_id", table_name="schedules")
    op.drop_index("ix_schedules_status_next_run_at", table_name="schedules")
    op.drop_table("schedules")
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.drop_column("payload")
    with op.batch_alter_table("turns", schema=None) as batch_op:
        batch_op.drop_column("prompt")
        batch_op.drop_column("lane")

"""pairing and access audit

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "access_events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=255), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("code", sa.String(length=16), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_access_events")),
    )
    op.create_table(
        "paired_users",
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("approved_by", sa.String(length=255), nullable=False),
        sa.Column("approved_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("code", sa.String(length=16), nullable=True),
        sa.Column("revoked_by", sa.String(length=255), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_paired_users")),
    )
    op.create_table(
        "pairing_requests",
        sa.Column("code", sa.String(length=16), nullable=False),
        sa.Column("platform", sa.String(length=16), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("conversation_id", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decided_by", sa.String(length=255), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_pairing_requests_conversation_id_conversations"),
        ),
        sa.PrimaryKeyConstraint("code", name=op.f("pk_pairing_requests")),
    )
    with op.batch_alter_table("pairing_requests", schema=None) as batch_op:
        batch_op.create_index(
            "ix_pairing_requests_platform_status", ["platform", "status"], unique=False
        )
        batch_op.create_index(
            "ix_pairing_requests_user_status", ["user_id", "status"], unique=False
        )


def downgrade() -> None:

    with op.batch_alter_table("pairing_requests", schema=None) as batch_op:
        batch_op.drop_index("ix_pairing_requests_user_status")
        batch_op.drop_index("ix_pairing_requests_platform_status")

    op.drop_table("pairing_requests")
    op.drop_table("paired_users")
    op.drop_table("access_events")

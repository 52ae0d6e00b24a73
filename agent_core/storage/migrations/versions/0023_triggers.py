"""triggers and quiet runs: triggers (a conversation, a prompt, a secret: an HTTP request
or ``chatgate trigger fire`` queues a turn there) and each fire's receipt; a schedule's
``notify`` ("always", or "if_notable": a run posts only what its model marks worth
posting) and the quiet turns it queues; whether an approval offers "Allow in this
conversation" (a policy rule's ``always_allow``); the message a person's message replies to
or quotes, and when its author deleted it

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(
            sa.Column("notify", sa.String(16), nullable=False, server_default="always")
        )
    with op.batch_alter_table("turns") as batch:
        batch.add_column(
            sa.Column("quiet", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(
            sa.Column("always_allow", sa.Boolean(), nullable=False, server_default=sa.true())
        )
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("quote", sa.JSON()))
        batch.add_column(sa.Column("deleted_at", sa.DateTime(timezone=True)))
    op.create_table(
        "triggers",
        sa.Column("id", sa.String(16), primary_key=True),
        sa.Column(
            "conversation_id", sa.String(32), sa.ForeignKey("conversations.id"), nullable=False
        ),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("secret", sa.String(64), nullable=False),
        sa.Column("per_hour", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_by", sa.String(255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_triggers_conversation_id", "triggers", ["conversation_id"])
    op.create_table(
        "trigger_fires",
        sa.Column("id", _ID, primary_key=True),
        sa.Column("trigger_id", sa.String(16), sa.ForeignKey("triggers.id"), nullable=False),
        sa.Column("idempotency_key", sa.String(255)),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("bytes", sa.Integer(), nullable=False),
        sa.Column("turn_id", _ID, sa.ForeignKey("turns.id"), nullable=False),
        sa.Column("job_id", _ID, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("trigger_id", "idempotency_key", name="uq_trigger_fires_key"),
    )
    op.create_index(
        "ix_trigger_fires_trigger_received", "trigger_fires", ["trigger_id", "received_at"]
    )


def downgrade() -> None:
    op.drop_table("trigger_fires")
    op.drop_table("triggers")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("deleted_at")
        batch.drop_column("quote")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("always_allow")
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("quiet")
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("notify")

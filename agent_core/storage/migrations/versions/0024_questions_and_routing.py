"""questions and approval routing: an approval of kind "question" (``ask_user``) keeps the
answer it got and who pressed "Other" (their next message is the answer); a policy rule's
``route`` (here, approvers, both) and ``escalate_to`` (who gets the prompt when its time is
up); and every copy of a prompt that is not in its conversation (an approver's DM), so a
decision updates them all

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("answer", sa.Text()))
        batch.add_column(sa.Column("answering", sa.String(255)))
        batch.add_column(sa.Column("route", sa.String(16), nullable=False, server_default="here"))
        batch.add_column(sa.Column("escalate_to", sa.JSON()))
    op.create_table(
        "approval_copies",
        sa.Column("approval_id", sa.String(32), sa.ForeignKey("approvals.id"), primary_key=True),
        sa.Column("platform", sa.String(16), primary_key=True),
        sa.Column("workspace", sa.String(255), primary_key=True),
        sa.Column("channel", sa.String(255), primary_key=True),
        sa.Column("message_id", sa.String(255)),
        sa.Column("sent_to", sa.String(255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("approval_copies")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("escalate_to")
        batch.drop_column("route")
        batch.drop_column("answering")
        batch.drop_column("answer")

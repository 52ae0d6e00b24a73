"""approval policy: approvals the requester may not give themselves (self_approve = false),
and conversation grants that cover only the person who made them

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "approvals",
        sa.Column("self_approve", sa.Boolean(), nullable=False, server_default=sa.true()),
    )
    # One grant per person: "Allow in this conversation" no longer speaks for the others.
    with op.batch_alter_table("grants", recreate="always") as batch_op:
        batch_op.drop_constraint("pk_grants", type_="primary")
        batch_op.create_primary_key("pk_grants", ["conversation_id", "tool", "granted_by"])


def downgrade() -> None:
    op.execute(
        "DELETE FROM grants WHERE EXISTS (SELECT 1 FROM grants AS g "
        "WHERE g.conversation_id = grants.conversation_id AND g.tool = grants.tool "
        "AND g.granted_by < grants.granted_by)"
    )
    with op.batch_alter_table("grants", recreate="always") as batch_op:
        batch_op.drop_constraint("pk_grants", type_="primary")
        batch_op.create_primary_key("pk_grants", ["conversation_id", "tool"])
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.drop_column("self_approve")

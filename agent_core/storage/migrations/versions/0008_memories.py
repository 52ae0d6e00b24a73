"""memories, with full-text search per backend

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_SQLITE_FTS = (
    "CREATE VIRTUAL TABLE memories_fts USING fts5(fact, about, content='memories', "
    "content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
    "CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN "
    "INSERT INTO memories_fts(rowid, fact, about) VALUES (new.id, new.fact, new.about); END",
    "CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN "
    "INSERT INTO memories_fts(memories_fts, rowid, fact, about) "
    "VALUES ('delete', old.id, old.fact, old.about); END",
    "CREATE TRIGGER memories_au AFTER UPDATE OF fact, about ON memories BEGIN "
    "INSERT INTO memories_fts(memories_fts, rowid, fact, about) "
    "VALUES ('delete', old.id, old.fact, old.about); "
    "INSERT INTO memories_fts(rowid, fact, about) VALUES (new.id, new.fact, new.about); END",
)
_POSTGRES_FTS = (
    "ALTER TABLE memories ADD COLUMN memories_fts tsvector GENERATED ALWAYS AS "
    "(to_tsvector('simple', coalesce(about, '') || ' ' || fact)) STORED",
    "CREATE INDEX memories_fts_gin ON memories USING gin (memories_fts)",
)


def upgrade() -> None:
    op.create_table(
        "memories",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("conversation_id", sa.String(length=32), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("about", sa.String(length=200), nullable=True),
        sa.Column("fact", sa.Text(), nullable=False),
        sa.Column("source", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("superseded_by", _ID, nullable=True),
        sa.Column("forgotten_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversations.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_memories_user_id_scope", "memories", ["user_id", "scope"])
    op.create_index("ix_memories_conversation_id", "memories", ["conversation_id"])
    statements = _SQLITE_FTS if op.get_bind().dialect.name == "sqlite" else _POSTGRES_FTS
    for statement in statements:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for trigger in ("memories_ai", "memories_ad", "memories_au"):
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        op.execute("DROP TABLE IF EXISTS memories_fts")
    op.drop_table("memories")

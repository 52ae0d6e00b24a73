"""Alembic environment: chatgate always hands in an open connection (see database.py)."""

from __future__ import annotations

from alembic import context

from agent_core.storage.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations with `chatgate migrate`, which supplies the connection")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()

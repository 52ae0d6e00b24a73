"""Alembic environment: chatgate always hands in an open connection (see database.py)."""

from __future__ import annotations

from alembic import context

from agent_core.storage.columns import metadata
from agent_core.storage.schema import FTS_OBJECTS


def _declared(
    obj: object, name: str | None, kind: str, reflected: bool, compare_to: object
) -> bool:
    # Full-text search objects are made per backend by migration 0008, not declared.
    return not (name or "").startswith(FTS_OBJECTS)


connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations with `chatgate migrate`, which supplies the connection")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
    include_object=_declared,
)
with context.begin_transaction():
    context.run_migrations()

"""Migrations create exactly the tables the code declares."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from agent_core.storage.database import migrate, revision_status
from agent_core.storage.schema import metadata


def _diff(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, metadata))


async def test_migrated_database_matches_the_schema(engine: AsyncEngine) -> None:
    """Autogenerate finds nothing to change after upgrading to head."""
    async with engine.connect() as conn:
        assert await conn.run_sync(_diff) == []
    current, head = await revision_status(engine)
    assert current == head is not None


async def test_migrating_twice_is_harmless(engine: AsyncEngine) -> None:
    """Every start migrates; a second run is a no-op."""
    await migrate(engine)
    current, head = await revision_status(engine)
    assert current == head

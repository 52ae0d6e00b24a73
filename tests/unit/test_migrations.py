"""Migrations create exactly the tables the code declares."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection

from agent_core.storage.database import Database
from agent_core.storage.schema import metadata


def _diff(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, metadata))


async def test_migrated_database_matches_the_schema(database: Database) -> None:
    """Autogenerate finds nothing to change after upgrading to head."""
    assert await database.read(_diff) == []
    current, head = await database.revision_status()
    assert current == head
    assert head is not None


async def test_migrating_twice_is_harmless(database: Database) -> None:
    """Every start migrates; a second run is a no-op."""
    await database.migrate()
    current, head = await database.revision_status()
    assert current == head

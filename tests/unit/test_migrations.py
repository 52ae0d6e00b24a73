"""Migrations create exactly the tables the code declares."""

from __future__ import annotations

from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.engine import Connection

from agent_core.errors import StorageError
from agent_core.storage import database as database_module
from agent_core.storage.columns import metadata
from agent_core.storage.database import Database, newest_revision
from agent_core.storage.schema import FTS_OBJECTS


def _downgrade(connection: Connection, revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", database_module._MIGRATIONS)
    config.attributes["connection"] = connection
    command.downgrade(config, revision)


def _declared(obj: Any, name: str | None, kind: str, reflected: bool, compare_to: Any) -> bool:
    """Full-text search objects are made per backend by the migrations, not declared."""
    return not (name or "").startswith(FTS_OBJECTS)


def _diff(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(
        connection, opts={"compare_type": True, "include_object": _declared}
    )
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


def test_newest_revision_is_alembics_head() -> None:
    """Start-up skips Alembic when the database is at the head read off the file names;
    that shortcut must name the head Alembic itself would migrate to."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(database_module._MIGRATIONS)
    assert script.get_heads() == [newest_revision()]


async def test_an_older_database_is_still_migrated(database: Database) -> None:
    """The shortcut only skips when the stamp is the head: a database one revision behind
    is upgraded by Alembic."""
    head = newest_revision()
    previous = f"{int(head) - 1:04d}"
    await database.write(_downgrade, previous)
    assert (await database.revision_status())[0] == previous
    await database.migrate()
    assert await database.revision_status() == (head, head)
    assert await database.read(_diff) == []


async def test_an_older_chatgate_refuses_a_newer_schema_clearly(database: Database) -> None:
    """A rollback across a migration: a one-line error naming both revisions, no traceback
    from Alembic about a revision it cannot locate."""
    await database.write(
        lambda conn: conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    )
    newest = newest_revision()
    with pytest.raises(
        StorageError, match=rf"revision 9999, newer than this chatgate knows \({newest}\)"
    ):
        await database.migrate()

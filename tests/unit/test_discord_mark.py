"""The Discord hearing mark: never past a message still being stored, and not kept while a
new session has not caught up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from adapters.discord.catch_up import Mark

# discord.py imports audioop, deprecated in Python 3.11 (imported here, in the test).
pytestmark = pytest.mark.filterwarnings("ignore:'audioop' is deprecated:DeprecationWarning")

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_the_mark_is_now_when_nothing_is_being_stored() -> None:
    assert Mark().until(NOW) == NOW


def test_the_mark_stays_before_the_oldest_message_still_being_stored() -> None:
    from discord.utils import snowflake_time, time_snowflake

    mark = Mark()
    older = time_snowflake(NOW - timedelta(seconds=30))
    newer = time_snowflake(NOW - timedelta(seconds=5))
    mark.storing(newer)
    mark.storing(older)
    assert mark.until(NOW) == snowflake_time(older)
    mark.stored(older)
    assert mark.until(NOW) == snowflake_time(newer)
    mark.stored(newer)
    assert mark.until(NOW) == NOW


def test_no_mark_is_kept_between_a_new_session_and_its_catch_up() -> None:
    mark = Mark()
    mark.hold()
    assert mark.until(NOW) is None
    mark.release()
    assert mark.until(NOW) == NOW

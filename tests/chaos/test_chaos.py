"""The short chaos run in ``make test``: about 25 kills, one crash of PostgreSQL and of
Redis, and Discord sessions cut and ended (``make chaos`` is the long one). Its figures
line is printed for CI's log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.chaos.harness import Chaos, Plan, failures, table

# It brings its own PostgreSQL and Redis and takes no test database: the PostgreSQL pass
# leaves it to the SQLite one (tests/conftest.py), which runs it once.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_random_kills_and_outages_lose_and_repeat_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    figures = Chaos(Plan(seconds=55, kill_every=(1.2, 2.8), conversations=3), tmp_path).run()
    with capsys.disabled():  # into CI's log, passed or not
        print(f"\nCHAOS FIGURES {json.dumps(figures, sort_keys=True)}\n{table(figures)}")
    assert failures(figures) == [], figures
    assert figures["kills"] >= 20, figures
    assert figures["postgres_restarts"] == figures["redis_restarts"] == 1
    # Redis was down while a schedule fell due (and that slot ran once: the zeros above).
    assert figures["slots_due_while_redis_down"] >= 1, figures
    # Discord messages reached no session (ended, or its holder dead) and none was lost.
    assert figures["discord_sent_while_nobody_connected"] >= 1, figures

"""Jitter: a schedule may start each run at any moment within a window after its slot
("any time within 5 minutes of 09:00"), so that a burst of runs due at once reaches the
model provider spread over the window rather than all in the same second.

The moment is a hash of the schedule and the slot: every dispatcher computes the same one
(a crash and a restart plan the same start), and over many schedules the starts are
uniform across the window. Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timedelta

from agent_core.scheduling.recurrence import ScheduleError

MAX_JITTER = timedelta(hours=1)
_WINDOW = re.compile(r"(?:within\s+)?(?P<count>[0-9]+)\s*(?P<unit>s|sec|secs|seconds?|m|min|mins"
                     r"|minutes?|h|hr|hrs|hours?)")  # fmt: skip
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600}


def parse_jitter(text: str | None) -> int:
    """``"5m"``, ``"90 seconds"``, ``"within 1h"`` as whole seconds (None or "0": none).

    Raises ``ScheduleError`` naming what is wrong."""
    if text is None or text.strip() in ("", "0"):
        return 0
    match = _WINDOW.fullmatch(text.strip().lower())
    if match is None:
        raise ScheduleError(
            f"{text!r} is not a jitter window: write a number and s, m or h (e.g. '5m')"
        )
    seconds = int(match["count"]) * _UNIT_SECONDS[match["unit"][0]]
    if seconds > MAX_JITTER.total_seconds():
        raise ScheduleError(f"a jitter of {text!r} is too long: at most 1h")
    return seconds


def start_of(schedule_id: str, slot: datetime, window_seconds: int) -> datetime:
    """When the run of ``schedule_id`` for ``slot`` starts: in [slot, slot + window]."""
    if window_seconds <= 0:
        return slot
    digest = hashlib.blake2b(f"{schedule_id}|{slot.isoformat()}".encode(), digest_size=8)
    fraction = int.from_bytes(digest.digest()) / 2**64
    return slot + timedelta(microseconds=int(fraction * window_seconds * 1_000_000))

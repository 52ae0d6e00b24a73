"""Test-only fault points: kill this process with SIGKILL at a named step boundary.

Crash tests set ``CHATGATE_TEST_FAULT=after_model_call`` (for example) on a gateway they
run as a subprocess, then restart it without the setting and check that the turn finishes
exactly once. With no points configured, :meth:`FaultPoints.hit` does nothing.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Collection

POINTS = (
    "after_accept",
    "after_model_call",
    "after_tool_intent",
    "after_tool_run",
    "after_approval_request",
    "after_prompt_send",
    "after_approval_prompt",
    "after_decision",
    "after_chunk_sent",
    "after_live_post",
    "after_file_stored",
    "after_reply_intent",
    "after_send",
    "after_get_updates",
    "after_job_turn",
    "after_slots_committed",
)


class FaultPoints:
    """The set of step boundaries at which this process dies."""

    def __init__(self, names: Collection[str] = ()) -> None:
        unknown = set(names) - set(POINTS)
        if unknown:
            raise ValueError(f"unknown fault points {sorted(unknown)}; known: {POINTS}")
        self._names = frozenset(names)

    def hit(self, name: str) -> None:
        """Die here, at once and without cleanup, if ``name`` is configured."""
        if name in self._names:
            os.kill(os.getpid(), signal.SIGKILL)

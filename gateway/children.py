"""``chatgate run`` with Redis: the Celery worker and beat as supervised child processes.

Each child is restarted when it dies (with a growing pause if it keeps dying), dies with
us (``PR_SET_PDEATHSIG``, so a SIGKILLed ``run`` leaves no orphans), and is stopped with
SIGTERM (a warm shutdown: a job in flight is finished or handed back) when we stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import signal
import sys
import time
from collections.abc import Sequence

import structlog

log = structlog.get_logger("chatgate.children")

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class Child:
    """One ``chatgate <role>`` subprocess, kept running."""

    def __init__(self, role: str, *, args: Sequence[str] = ()) -> None:
        self.role = role
        self._argv = [sys.executable, "-m", "gateway.cli", role, *args]
        self._process: asyncio.subprocess.Process | None = None
        self._stopping = False

    @property
    def pid(self) -> int | None:
        """The running child's process id."""
        return None if self._process is None else self._process.pid

    async def keep_running(self) -> None:
        """Start the child, and start it again whenever it exits, until ``stop``."""
        pause = 1.0
        while not self._stopping:
            started = time.monotonic()
            self._process = await asyncio.create_subprocess_exec(
                *self._argv, preexec_fn=_die_with_parent
            )
            log.info("child started", role=self.role, pid=self._process.pid)
            code = await self._process.wait()
            if self._stopping:
                return
            pause = 1.0 if time.monotonic() - started > 60 else min(pause * 2, 30.0)
            log.error("child exited; restarting", role=self.role, code=code, pause=pause)
            await asyncio.sleep(pause)

    async def stop(self, grace: float) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds."""
        self._stopping = True
        process = self._process
        if process is None or process.returncode is not None:
            return
        process.terminate()
        try:
            async with asyncio.timeout(grace):
                await process.wait()
        except TimeoutError:
            log.warning("child did not stop in time; killing it", role=self.role)
            process.kill()
            await process.wait()

"""A conversation's lease while its lane runs turns: the heartbeat that keeps it (and
cancels the body once it is lost), and what a turn sees of its lane."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import structlog

from agent_core.errors import LeaseLost
from agent_core.records import TurnRecord

log = structlog.get_logger("chatgate.turn")


@dataclass(slots=True)
class Beat:
    """The heartbeat's view of its body: is it giving the lease up on purpose?"""

    releasing: bool = False


@dataclass(slots=True)
class Lane:
    """A conversation's lane as a turn sees it: the lease's owner and heartbeat, and the
    next turn when the reply's receipt started it (``taken``) in the same transaction."""

    conversation_id: str
    owner: str
    beat: Beat
    next: TurnRecord | None = None
    taken: bool = False


@contextlib.asynccontextmanager
async def heartbeat(
    renew: Callable[[], Awaitable[bool]], *, every: float, what: str
) -> AsyncIterator[Beat]:
    """Keep a lease while the body runs: ``renew()`` every ``every`` seconds; when it says
    the lease is gone, cancel the body, which then raises ``LeaseLost(what)``. Not when the
    body is giving the lease up itself (``releasing``)."""
    body = asyncio.current_task()
    assert body is not None
    lost = False
    beat = Beat()

    async def keep() -> None:
        nonlocal lost
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(every)
            try:
                held = await renew()
            except Exception:
                # The database is unreachable: keep trying while the lease may still be
                # ours; past its expiry (three periods) someone else may hold it.
                log.warning("renewing a lease failed", what=what, exc_info=True)
                held = time.monotonic() - renewed < 3 * every
            else:
                renewed = time.monotonic() if held else renewed
            if not held and not beat.releasing:
                lost = True
                body.cancel()
                return

    keeper = asyncio.create_task(keep(), name=f"lease:{what}")
    try:
        yield beat
    except asyncio.CancelledError:
        if lost:
            raise LeaseLost(what) from None
        raise
    finally:
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper

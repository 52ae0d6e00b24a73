"""The pacer between a model's stream and a live reply: nothing for a short, fast reply;
the text so far at the platform's pace for a slow or long one; a failing platform slowed
down, never the turn's failure."""

from __future__ import annotations

import asyncio
import itertools

from agent_core.live_reply import Pacer
from agent_core.testing import RecordingLiveReply


class _FailingLive(RecordingLiveReply):
    """Refuses its first ``failures`` updates (a platform's 429)."""

    def __init__(self, *, interval: float, failures: int) -> None:
        super().__init__("k", interval=interval)
        self.failures = failures
        self.tries = 0

    async def show(self, text: str, *, status: str | None) -> None:
        self.tries += 1
        if self.tries <= self.failures:
            raise RuntimeError("429: slow down")
        await super().show(text, status=status)


async def _written(pacer: Pacer, text: str, *, pieces: int, seconds: float) -> None:
    """``text`` heard in ``pieces`` growing prefixes over ``seconds``."""
    for count in range(1, pieces + 1):
        pacer.heard(text[: len(text) * count // pieces])
        await asyncio.sleep(seconds / pieces)


async def test_a_short_fast_reply_is_never_shown_as_it_grows() -> None:
    live = RecordingLiveReply("k", interval=0.01)
    pacer = Pacer(live, first_after=1.0)
    await _written(pacer, "a short answer", pieces=5, seconds=0.05)
    await pacer.close()
    assert live.shown == []
    assert not live.closed  # nothing was shown, so there is no draft to end
    assert not pacer.showing


async def test_a_slow_reply_is_shown_at_the_platform_s_pace_and_the_draft_ended() -> None:
    """Updates start once the reply is slow, each newer than the last, no closer together
    than the live reply's interval."""
    live = RecordingLiveReply("k", interval=0.1)
    times: list[float] = []
    show = live.show

    async def timed(text: str, *, status: str | None) -> None:
        times.append(asyncio.get_running_loop().time())
        await show(text, status=status)

    live.show = timed  # type: ignore[method-assign]
    pacer = Pacer(live, first_after=0.2)
    text = "word " * 100
    await _written(pacer, text, pieces=100, seconds=1.0)
    await asyncio.sleep(0.15)
    await pacer.close()
    assert live.closed
    assert 2 <= len(live.shown) <= 10  # 0.8 s of showing, 0.1 s apart at least
    assert all(b - a >= 0.095 for a, b in itertools.pairwise(times))
    shown = [text for text, _status in live.shown]
    assert all(len(b) > len(a) for a, b in itertools.pairwise(shown))
    assert shown[-1] == text  # the last update caught up with the whole text


async def test_a_reply_past_a_screen_is_shown_at_once() -> None:
    live = RecordingLiveReply("k", interval=0.01)
    pacer = Pacer(live, first_after=60.0, screen=100)
    pacer.heard("x" * 99)
    await asyncio.sleep(0.02)
    assert live.shown == []
    pacer.heard("x" * 100)
    await asyncio.sleep(0.02)
    await pacer.close()
    assert live.shown == [("x" * 100, None)]


async def test_what_the_agent_does_between_model_calls_is_a_status_under_the_text() -> None:
    live = RecordingLiveReply("k", interval=0.01)
    pacer = Pacer(live, first_after=0.0)
    pacer.heard("Let me look.")
    await asyncio.sleep(0.02)
    pacer.working("Running http_request…")
    await asyncio.sleep(0.02)
    pacer.heard("It is sunny.")
    await asyncio.sleep(0.02)
    await pacer.close()
    assert live.shown == [
        ("Let me look.", None),
        ("Let me look.", "Running http_request…"),
        ("It is sunny.", None),
    ]


async def test_a_platform_that_refuses_updates_is_slowed_down_and_gets_the_newest_text() -> None:
    live = _FailingLive(interval=0.02, failures=2)
    pacer = Pacer(live, first_after=0.0)
    pacer.heard("one")
    await asyncio.sleep(0.01)
    pacer.heard("one two")
    await asyncio.sleep(0.3)  # 0.04 + 0.08 s of backing off, then the update
    await pacer.close()
    assert live.tries == 3
    assert live.shown == [("one two", None)]
    assert pacer._interval == 0.08


async def test_closing_lets_an_update_under_way_finish_and_journals_its_message() -> None:
    """A post in flight when the reply is done is not cut off: cut off, it could reach the
    platform without its message id reaching the journal (and the reply be posted twice)."""
    posted: list[str] = []

    class _SlowPost(RecordingLiveReply):
        async def show(self, text: str, *, status: str | None) -> None:
            await asyncio.sleep(0.2)
            await super().show(text, status=status)

    live = _SlowPost("7", interval=0.01, posts=True)

    async def journal(message: str) -> None:
        posted.append(message)

    pacer = Pacer(live, posted=journal, first_after=0.0)
    pacer.heard("the first words")
    await asyncio.sleep(0.05)  # the post is under way
    await pacer.close()
    assert live.shown == [("the first words", None)]
    assert posted == ["pending", "live-7"]  # said before it posts, then its id
    assert live.closed

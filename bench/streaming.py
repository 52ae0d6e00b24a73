"""What showing a reply as it is written costs: Slack mentions answered with a
2,000-character reply by ``chatgate gateway`` with ``CHATGATE_STREAM_REPLIES`` on and off,
side by side, against the same fake Slack and instant fake model. A reply that long is past
a screen, so streamed it is shown as it grows: the model's answer read as server-sent
chunks (8 characters each from the fake), a chat stream started and stopped. Unstreamed,
one model answer and one ``chat.postMessage``. CPU seconds of the gateway per reply, median
of five runs each, alternating. Status marks are off on both sides (see ``_run``)."""

from __future__ import annotations

import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.measure import cpu_and_peak
from bench.slack import _mention
from tests.fakes.gateway import GatewayProcess, http
from tests.fakes.model_server import FakeModelServer, Scripted
from tests.fakes.slack_server import FakeSlack, signed_headers

REPLY = " ".join(f"word{i:03d}" for i in range(250))[:2000]
MENTIONS = 100
CLIENTS = 10
ROUNDS = 5


def _answered(slack: FakeSlack) -> int:
    """Replies delivered so far: posted whole, or streamed and stopped."""
    return len(slack.called("chat.postMessage")) + len(slack.called("chat.stopStream"))


def _drive(url: str, slack: FakeSlack, first: int, count: int) -> None:
    def post(index: int) -> None:
        body = _mention(first + index)
        headers = {"Content-Type": "application/json", **signed_headers(body)}
        assert http("POST", url, raw=body.encode(), headers=headers, timeout=30)[0] == 200

    before = _answered(slack)
    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(post, range(count)))
    deadline = time.monotonic() + 300
    while _answered(slack) < before + count:
        assert time.monotonic() < deadline, "replies did not arrive"
        time.sleep(0.02)


def _run(stream: bool) -> tuple[float, int]:
    """(CPU seconds per reply, Slack calls per reply) of one gateway."""
    with (
        FakeModelServer() as model,
        FakeSlack() as slack,
        tempfile.TemporaryDirectory() as workdir,
    ):
        model.respond = lambda _body: Scripted(text=REPLY)
        gateway = GatewayProcess(
            database_url=f"sqlite+aiosqlite:///{workdir}/bench.db",
            workdir=Path(workdir),
            CHATGATE_MODEL="openai/gpt-4o-mini",
            CHATGATE_MODEL_API_BASE=model.base_url,
            CHATGATE_MODEL_API_KEY="sk-bench",
            CHATGATE_LOG_LEVEL="warning",
            CHATGATE_ACCESS="open",
            CHATGATE_RATE_BURST="100000",
            CHATGATE_RATE_PER_MINUTE="100000",
            CHATGATE_STREAM_REPLIES="true" if stream else "false",
            # A turn slowed past a second by the load would be marked "working" (reactions,
            # journaled): another feature's cost, and more of it on the slower side.
            CHATGATE_STATUS_MARKS="false",
            **slack.settings(),
        )
        gateway.start()
        try:
            assert gateway.pid is not None
            url = f"{gateway.url}/slack/events"
            _drive(url, slack, 900_000, 10)  # warm up: imports, connections
            calls_before = len(slack.calls)
            cpu_before, _ = cpu_and_peak(gateway.pid)
            _drive(url, slack, 0, MENTIONS)
            cpu_after, _ = cpu_and_peak(gateway.pid)
            calls = len(slack.calls) - calls_before
        finally:
            gateway.terminate()
    return (cpu_after - cpu_before) / MENTIONS, round(calls / MENTIONS)


def bench_streaming() -> None:
    """Print CPU per 2,000-character reply, streamed and not, and the ratio."""
    streamed: list[tuple[float, int]] = []
    whole: list[tuple[float, int]] = []
    for _ in range(ROUNDS):
        whole.append(_run(stream=False))
        streamed.append(_run(stream=True))
    cpu = statistics.median(c for c, _ in streamed)
    cpu_whole = statistics.median(c for c, _ in whole)
    print(
        f"streamed reply CPU  {cpu * 1000:7.2f} ms/reply  posted whole {cpu_whole * 1000:6.2f}"
        f" ms/reply   ratio {cpu / cpu_whole:5.2f}x   (2,000 characters; Slack calls a reply"
        f" {streamed[0][1]} vs {whole[0][1]})"
    )


if __name__ == "__main__":
    bench_streaming()

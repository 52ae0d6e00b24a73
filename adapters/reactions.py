"""Which emoji rate a reply (``agent_core.feedback``): 👍 up, 👎 down, in any skin tone.
Platforms that name their emoji (Slack) map the names to these first."""

from __future__ import annotations

from agent_core.events import Rating

# Fitzpatrick modifiers (U+1F3FB..U+1F3FF) and the variation selector a client may add.
_MODIFIERS = dict.fromkeys(range(0x1F3FB, 0x1F400)) | {0xFE0F: None}
_RATINGS: dict[str, Rating] = {"\N{THUMBS UP SIGN}": "up", "\N{THUMBS DOWN SIGN}": "down"}


def rating_of(emoji: str) -> Rating | None:
    """The rating an emoji gives, or None when it gives none."""
    return _RATINGS.get(emoji.translate(_MODIFIERS))

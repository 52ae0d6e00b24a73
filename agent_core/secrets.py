"""Secrets the model may refer to by name (``{{secret:NAME}}``) but never see.

The wiring point reads each configured environment variable once and hands the values in;
tools substitute them at execution, and every tool output is scrubbed before it is
journaled or shown to the model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_REFERENCE = re.compile(r"\{\{\s*secret:([A-Za-z0-9_]+)\s*\}\}")


class UnknownSecret(KeyError):
    """The model referred to a secret name that is not configured."""


class Secrets:
    """Named secret values: substitute references, scrub values."""

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        self._values = {name: value for name, value in (values or {}).items() if value}

    @property
    def names(self) -> tuple[str, ...]:
        """The names the model may use."""
        return tuple(sorted(self._values))

    def substitute(self, text: str) -> str:
        """Replace every ``{{secret:NAME}}`` with its value; unknown names raise."""

        def value(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in self._values:
                raise UnknownSecret(name)
            return self._values[name]

        return _REFERENCE.sub(value, text)

    def scrub(self, text: str) -> str:
        """Replace every secret value in ``text`` with ``[secret:NAME]``."""
        for name, value in sorted(self._values.items(), key=lambda item: -len(item[1])):
            text = text.replace(value, f"[secret:{name}]")
        return text

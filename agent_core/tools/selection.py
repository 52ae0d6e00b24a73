"""Offering a large tool set: with many MCP tools, every tool's schema in every request
costs tokens and confuses models. Past ``limit`` tools, a turn is offered the built-ins,
the others that best match its message, and ``more_tools(query)``, which finds more by
keyword and offers them from the next model call of the turn on."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Annotated

from pydantic import Field

from agent_core.tools.base import Tool, ToolContext

_WORDS = re.compile(r"[a-z0-9]+")
MORE_TOOLS = "more_tools"


def _words(text: str) -> set[str]:
    return {w for w in _WORDS.findall(text.lower()) if len(w) > 2}


def rank(tools: Iterable[Tool], query: str) -> list[Tool]:
    """Tools by how many of the query's words their name and description share (ties keep
    their order); tools sharing none are left out."""
    wanted = _words(query)
    scored = []
    for index, tool in enumerate(tools):
        overlap = len(wanted & _words(f"{tool.name.replace('_', ' ')} {tool.description}"))
        if overlap:
            scored.append((-overlap, index, tool))
    return [tool for _, _, tool in sorted(scored, key=lambda item: item[:2])]


class Offer:
    """The tools one turn is offered; grows when the model asks for more."""

    def __init__(self, tools: Mapping[str, Tool], *, message: str, limit: int) -> None:
        self._all = dict(tools)
        if len(tools) <= limit:
            self.names: list[str] = list(tools)
            return
        builtin = [name for name in tools if "__" not in name]
        room = max(0, limit - len(builtin) - 1)
        others = [t for t in tools.values() if "__" in t.name]
        self.names = builtin + [t.name for t in rank(others, message)[:room]]
        more = self._more_tools()
        self._all[more.name] = more
        self.names.append(more.name)

    def tools(self) -> dict[str, Tool]:
        """Every tool the turn may call (offered or not: a call by name still works)."""
        return self._all

    def specs(self) -> list[dict[str, object]]:
        """What the next model call is offered."""
        return [self._all[name].spec() for name in self.names]

    def _more_tools(self) -> Tool:
        async def more_tools(
            context: ToolContext, query: Annotated[str, Field(min_length=1, max_length=300)]
        ) -> str:
            """Find more tools by what they do ("create github issue", "search tickets");
            the ones found are offered from your next step on."""
            hidden = [t for name, t in self._all.items() if name not in self.names]
            found = rank(hidden, query)[:8]
            if not found:
                return "No other tool matches that; the tools you have are all there is."
            self.names.extend(t.name for t in found)
            return "Now available:\n" + "\n".join(f"{t.name}: {t.description}" for t in found)

        return Tool(more_tools, name=MORE_TOOLS, idempotent=True)

"""The registry: factories that build, per turn, the tools that turn may use."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from agent_core.errors import ConfigError
from agent_core.tools.base import Tool, TurnContext

ToolFactory = Callable[[TurnContext], Iterable[Tool]]


class ToolRegistry:
    """Builds a turn's tools from every factory; a name may appear only once."""

    def __init__(self, factories: Sequence[ToolFactory] = ()) -> None:
        self._factories = tuple(factories)

    def tools_for(self, turn: TurnContext) -> dict[str, Tool]:
        """The tools this turn may use, by name."""
        tools: dict[str, Tool] = {}
        for factory in self._factories:
            for tool in factory(turn):
                if tool.name in tools:
                    raise ConfigError("tools", f"two tools are named {tool.name!r}")
                tools[tool.name] = tool
        return tools

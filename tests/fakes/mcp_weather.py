"""A small MCP server built on the official ``mcp`` SDK, for the tests: one tool,
``forecast(city)``, that appends each call to the file named by ``CALLS_FILE`` (so a test
can count how often it really ran); for ``Slowtown`` it never answers (a call to cut short
by a crash). Over stdio, or streamable HTTP when ``MCP_PORT`` is set."""

from __future__ import annotations

import os
import sys
import time

from mcp.server.fastmcp import FastMCP

server = FastMCP("weather")


@server.tool()
def forecast(city: str, days: int = 1) -> str:
    """The weather forecast for a city."""
    with open(os.environ["CALLS_FILE"], "a", encoding="utf-8") as calls:
        calls.write(f"{city}\n")
    if city == "Slowtown":
        time.sleep(3600)
    return f"{city}: sunny, 21 C, for {days} day(s)"


if __name__ == "__main__":
    port = os.environ.get("MCP_PORT")
    if port:  # streamable HTTP on 127.0.0.1:MCP_PORT/mcp
        server.settings.host = "127.0.0.1"
        server.settings.port = int(port)
        server.run("streamable-http")
    else:
        print("weather server ready on stdio", file=sys.stderr, flush=True)
        server.run("stdio")

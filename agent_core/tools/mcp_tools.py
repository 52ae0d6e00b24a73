"""Tools from MCP servers (``[mcp.servers.NAME]``), through the official ``mcp`` SDK.

Each server is connected once (a subprocess over stdio, or streamable HTTP) and kept open;
its tools join the built-ins as ``server__tool``, through the same permission pipeline and
approvals (no default policy: chatgate asks, unless a ``[[policy]]`` rule says otherwise).
A server that cannot be reached at start is logged and left out; the others still work.

Each server's session lives in its own task, because the SDK's transports are anyio
context managers that must be entered and left in one task; calls from turns go through
the session object.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from agent_core.section_settings import McpServerSettings
from agent_core.tools.base import (
    DEFAULT_OUTPUT_LIMIT,
    InvalidArguments,
    Tool,
    ToolContext,
    ToolFailed,
    TurnContext,
)

log = structlog.get_logger("chatgate.mcp")

_NAME = re.compile(r"[^A-Za-z0-9_-]")
# OpenAI-style function names are at most 64 characters.
_NAME_LIMIT = 64


def tool_name(server: str, tool: str) -> str:
    """The name the model sees: ``server__tool``, within the function-name rules."""
    return f"{server}__{_NAME.sub('_', tool)}"[:_NAME_LIMIT]


class SchemaTool(Tool):
    """A tool described by a JSON schema (an MCP tool's ``inputSchema``) instead of a
    Python signature; arguments are checked with ``jsonschema``."""

    def __init__(
        self,
        call: Callable[[ToolContext, dict[str, Any]], Any],
        *,
        name: str,
        description: str,
        schema: Mapping[str, Any],
        idempotent: bool,
        timeout: float,
    ) -> None:
        import jsonschema

        self._call = call
        self.name = name
        self.description = description
        self._idempotent = idempotent
        self.timeout = timeout
        self.output_limit = DEFAULT_OUTPUT_LIMIT
        parameters = dict(schema) or {"type": "object", "properties": {}}
        self._validator = jsonschema.Draft202012Validator(parameters)
        self._spec = {
            "type": "function",
            "function": {"name": name, "description": description, "parameters": parameters},
        }

        async def run(context: ToolContext, **arguments: Any) -> str:
            return str(await self._call(context, arguments))

        self._fn = run

    def validate(self, arguments: str | Mapping[str, Any]) -> dict[str, Any]:
        """Parse the arguments and check them against the server's schema."""
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except ValueError as exc:
                raise InvalidArguments(f"arguments are not valid JSON: {exc}") from None
        if not isinstance(arguments, Mapping):
            raise InvalidArguments("arguments must be a JSON object")
        problems = [
            f"{'.'.join(str(p) for p in error.absolute_path) or 'arguments'}: {error.message}"
            for error in self._validator.iter_errors(dict(arguments))
        ]
        if problems:
            raise InvalidArguments("; ".join(problems))
        return dict(arguments)


class McpServers:
    """The configured servers: connected by :meth:`start`, closed by :meth:`close`."""

    def __init__(self, servers: Mapping[str, McpServerSettings]) -> None:
        self._servers = dict(servers)
        self._sessions: dict[str, Any] = {}
        self._tools: list[Tool] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def factory(self) -> Callable[[TurnContext], list[Tool]]:
        """The tool factory for the registry: every connected server's tools."""

        def tools(turn: TurnContext) -> list[Tool]:
            return list(self._tools)

        return tools

    async def start(self) -> None:
        """Connect to every server and list its tools (a failing server is left out)."""
        for name, server in self._servers.items():
            ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            task = asyncio.create_task(self._hold(name, server, ready), name=f"mcp:{name}")
            self._tasks.append(task)
            try:
                await asyncio.wait_for(asyncio.shield(ready), timeout=server.timeout)
            except Exception as exc:
                log.error("mcp server unavailable; its tools are left out", server=name,
                          error=str(exc) or type(exc).__name__)  # fmt: skip

    async def close(self) -> None:
        """Close every session (stdio servers are stopped)."""
        self._stop.set()
        for task in self._tasks:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, timeout=10)

    async def _hold(
        self, name: str, server: McpServerSettings, ready: asyncio.Future[None]
    ) -> None:
        from mcp import ClientSession

        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(_transport(name, server))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                listed = await session.list_tools()
                self._sessions[name] = session
                self._tools.extend(self._wrap(name, server, t) for t in listed.tools)
                log.info("mcp server connected", server=name, tools=len(listed.tools))
                ready.set_result(None)
                await self._stop.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.exception("mcp server connection ended", server=name)
        finally:
            self._sessions.pop(name, None)

    def _wrap(self, server: str, settings: McpServerSettings, tool: Any) -> Tool:
        annotations = getattr(tool, "annotations", None)
        read_only = bool(getattr(annotations, "readOnlyHint", False))

        async def call(context: ToolContext, arguments: dict[str, Any]) -> str:
            session = self._sessions.get(server)
            if session is None:
                raise ToolFailed(f"the MCP server {server} is not connected")
            result = await session.call_tool(tool.name, arguments)
            text = "\n".join(_content_text(item) for item in result.content)
            if getattr(result, "structuredContent", None) and not text:
                text = json.dumps(result.structuredContent)
            if result.isError:
                raise ToolFailed(text or f"{tool.name} failed")
            return text

        return SchemaTool(
            call,
            name=tool_name(server, tool.name),
            description=(tool.description or f"{tool.name} from the {server} MCP server")[:1000],
            schema=tool.inputSchema or {},
            idempotent=read_only,
            timeout=settings.timeout,
        )


def _content_text(item: Any) -> str:
    kind = getattr(item, "type", "")
    if kind == "text":
        return str(item.text)
    if kind == "resource":
        resource = getattr(item, "resource", None)
        return str(getattr(resource, "text", "") or f"[resource {getattr(resource, 'uri', '')}]")
    return f"[{kind} content]"


def _log_stderr(server: str, fd: int) -> None:
    """Log each line an MCP server writes to stderr, until it closes it."""
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as lines:
        # At most 2,000 characters at a time: a server that never writes a newline does
        # not grow this buffer without bound.
        while line := lines.readline(2000):
            if line.strip():
                log.info("mcp server stderr", server=server, line=line.rstrip())


def _transport(name: str, server: McpServerSettings) -> Any:
    if server.command is not None:
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        # Only what the server needs: PATH and its own settings, no chatgate secret.
        env = {"PATH": os.environ.get("PATH", ""), **server.env}
        parameters = StdioServerParameters(
            command=server.command, args=server.args, env=env, cwd=server.cwd
        )

        @contextlib.asynccontextmanager
        async def spawn() -> Any:
            # The server's stderr goes through a pipe into our log, a line per record.
            read_fd, write_fd = os.pipe()
            errlog = os.fdopen(write_fd, "w")
            threading.Thread(
                target=_log_stderr, args=(name, read_fd), name=f"mcp-stderr:{name}", daemon=True
            ).start()
            try:
                async with stdio_client(parameters, errlog=errlog) as streams:
                    errlog.close()  # the server has its own copy: EOF when it exits
                    yield streams
            finally:
                errlog.close()

        return spawn()
    import httpx
    from mcp.client.streamable_http import streamable_http_client

    assert server.url is not None
    client = httpx.AsyncClient(headers=server.headers, timeout=server.timeout)

    @contextlib.asynccontextmanager
    async def connect() -> Any:
        async with (
            client,
            streamable_http_client(server.url or "", http_client=client) as (
                read,
                write,
                _session_id,
            ),
        ):
            yield read, write

    return connect()

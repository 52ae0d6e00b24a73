"""``run_command``: a shell command in the conversation's sandbox (``agent_core.sandbox``).

The tool exists only when a sandbox backend works (or the operator chose ``none``); the
command runs in the conversation's scratch directory, seen at ``/scratch`` inside the
boundary, under the configured limits.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

from pydantic import Field

from agent_core.sandbox.base import Sandbox, SandboxLimits, inbox_dir, scratch_dir
from agent_core.tools.base import Tool, ToolContext, ToolFailed, TurnContext


def run_command_factory(
    state_dir: Path, sandbox: Sandbox, limits: SandboxLimits
) -> Callable[[TurnContext], list[Tool]]:
    """The factory of the ``run_command`` tool, with a scratch directory per conversation.

    The tool is built once (its schema and argument model are not free); the conversation
    comes from each call's context.
    """

    async def run_command(
        context: ToolContext,
        command: Annotated[str, Field(min_length=1, description="a /bin/sh command line")],
    ) -> str:
        """Run a shell command in this conversation's sandbox."""
        try:
            scratch = scratch_dir(state_dir, context.turn.conversation_id)
            files = inbox_dir(state_dir, context.turn.conversation_id)
        except (OSError, ValueError) as exc:
            raise ToolFailed(f"cannot prepare the scratch directory: {exc}") from exc
        return await sandbox.run(command, scratch=scratch, limits=limits, files=files)

    where = (
        "Runs as a plain process on the gateway's host (no sandbox)."
        if sandbox.name == "none"
        else "Its working directory (also $HOME) keeps files between this conversation's "
        "commands and is the only writable place; "
        + ("no network." if sandbox.network == "none" else "the network is reachable.")
    )
    tool = Tool(
        run_command,
        description=f"Run a shell command in this conversation's sandbox. {where} Limited "
        "in time, CPU, memory, processes and output.",
        idempotent=False,
        # The sandbox enforces its own wall clock; this only backs it up.
        timeout=limits.timeout + 10,
        output_limit=limits.output_limit + 200,
    )
    return lambda turn: [tool]

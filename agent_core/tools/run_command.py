"""``run_command``: a shell command in a sandboxed subprocess.

Limits: wall-clock time (the process group is killed), CPU seconds and address space
(``setrlimit`` in the child, set by a tiny launcher so nothing runs between fork and exec
in this multi-threaded process), file size, processes (when it runs as nobody), and output
(head and tail kept). It is not a network sandbox: commands can open connections. The command
runs in a scratch directory of its conversation, with an environment that holds no secret
and no chatgate setting: only PATH, HOME, TMPDIR and LANG.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import Field

from agent_core.tools.base import Tool, ToolContext, ToolFailed, TurnContext

# Runs in the child: apply the limits, drop root to nobody (so the command cannot read
# the gateway's files or /proc/<gateway>/environ), then become /bin/sh.
# Arguments: cpu seconds, memory bytes, file size bytes, uid, command.
_LAUNCHER = (
    "import os, resource, sys\n"
    "cpu, memory, fsize, uid = (int(v) for v in sys.argv[1:5])\n"
    "resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))\n"
    "resource.setrlimit(resource.RLIMIT_AS, (memory, memory))\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))\n"
    "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
    "if os.getuid() == 0:\n"
    "    resource.setrlimit(resource.RLIMIT_NPROC, (256, 256))\n"
    "    os.setgroups([])\n"
    "    os.setgid(uid)\n"
    "    os.setuid(uid)\n"
    "os.execv('/bin/sh', ['sh', '-c', sys.argv[5]])\n"
)
NOBODY = 65534
_FILE_SIZE = 64 * 1024 * 1024
_READ_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxLimits:
    """How much one command may use."""

    timeout: float = 30.0
    cpu_seconds: int = 20
    memory_mb: int = 512
    output_limit: int = 8_000


def scratch_dir(root: Path, conversation_id: str) -> Path:
    """The conversation's working directory, created on first use.

    When chatgate runs as root the command runs as nobody: its directory belongs to nobody
    and the directories above it can be entered but not listed.
    """
    path = root / "scratch" / conversation_id
    (path / "tmp").mkdir(parents=True, exist_ok=True)
    if os.getuid() == 0:
        for directory in (root, root / "scratch"):
            directory.chmod(0o711)
        for directory in (path, path / "tmp"):
            os.chown(directory, NOBODY, NOBODY)
            directory.chmod(0o700)
    return path


async def run_sandboxed(command: str, *, cwd: Path, limits: SandboxLimits) -> str:
    """Run ``command`` under the limits; return its exit status and (compressed) output."""
    environment = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(cwd),
        "TMPDIR": str(cwd / "tmp"),
        "LANG": "C.UTF-8",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-S",
        "-c",
        _LAUNCHER,
        str(limits.cpu_seconds),
        str(limits.memory_mb * 1024 * 1024),
        str(_FILE_SIZE),
        str(NOBODY),
        command,
        cwd=cwd,
        env=environment,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    assert process.stdout is not None
    keep = limits.output_limit
    head, tail, total = bytearray(), bytearray(), 0
    timed_out = False
    try:
        async with asyncio.timeout(limits.timeout):
            while chunk := await process.stdout.read(_READ_CHUNK):
                total += len(chunk)
                if len(head) < keep:
                    head += chunk[: keep - len(head)]
                tail = (tail + chunk)[-keep:]
            await process.wait()
    except TimeoutError:
        timed_out = True
    finally:
        _kill_group(process.pid)
        with contextlib.suppress(ProcessLookupError):
            await process.wait()
    output = _output(head, tail, total, keep)
    if timed_out:
        return f"killed after {limits.timeout:g}s (wall-clock limit)\n{output}"
    return f"{_status(process.returncode)}\n{output}"


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _status(code: int | None) -> str:
    if code is None or code >= 0:
        return f"exit code {code}"
    name = signal.Signals(-code).name
    why = {"SIGXCPU": " (CPU limit)", "SIGKILL": " (killed)", "SIGXFSZ": " (file size limit)"}
    return f"killed by {name}{why.get(name, '')}"


def _output(head: bytearray, tail: bytearray, total: int, keep: int) -> str:
    """All of the output when it fits, else its head and tail with the size stated."""
    if total <= keep:
        return bytes(head).decode(errors="replace")
    start, end = bytes(head[: keep * 2 // 3]), bytes(tail[-(keep // 3) :])
    omitted = total - len(start) - len(end)
    return (
        f"{start.decode(errors='replace')}\n[... {omitted} bytes omitted of {total} ...]\n"
        f"{end.decode(errors='replace')}"
    )


def run_command_factory(root: Path, limits: SandboxLimits) -> Callable[[TurnContext], list[Tool]]:
    """The factory of the ``run_command`` tool, with a scratch directory per conversation.

    The tool is built once (its schema and argument model are not free); the conversation
    comes from each call's context.
    """

    async def run_command(
        context: ToolContext,
        command: Annotated[str, Field(min_length=1, description="a /bin/sh command line")],
    ) -> str:
        """Run a shell command in this conversation's scratch directory.

        Limited in time, CPU, memory and output; no network credentials available.
        """
        try:
            cwd = scratch_dir(root, context.turn.conversation_id)
        except OSError as exc:
            raise ToolFailed(f"cannot prepare the scratch directory: {exc}") from exc
        return await run_sandboxed(command, cwd=cwd, limits=limits)

    tool = Tool(
        run_command,
        idempotent=False,
        # The sandbox enforces its own wall clock; this only backs it up.
        timeout=limits.timeout + 10,
        output_limit=limits.output_limit + 200,
    )
    return lambda turn: [tool]

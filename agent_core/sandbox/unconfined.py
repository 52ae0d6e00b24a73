"""The ``none`` backend: a plain subprocess under rlimits, only when the operator asks.

This is no boundary. The command runs in its conversation's scratch directory with an
environment that holds no secret, under CPU, memory, file-size and (as root) process
limits, as nobody when chatgate runs as root, else as chatgate's own user: then it can read
and write whatever chatgate can, reach the network and loopback, and leave processes behind
that left its session. chatgate warns at every start and in doctor while it is chosen.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agent_core.sandbox.base import (
    NOBODY,
    SEARCH_PATH,
    BackendName,
    Network,
    SandboxLimits,
    run_process,
)

# Runs in the child: apply the limits, drop root to nobody (so the command cannot read
# the gateway's files or /proc/<gateway>/environ), make its TMPDIR, then become /bin/sh.
# Arguments: cpu seconds, memory bytes, file size bytes, processes, uid, command.
_LAUNCHER = (
    "import os, resource, sys\n"
    "cpu, memory, fsize, nproc, uid = (int(v) for v in sys.argv[1:6])\n"
    "resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))\n"
    "resource.setrlimit(resource.RLIMIT_AS, (memory, memory))\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))\n"
    "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
    "if os.getuid() == 0:\n"
    "    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))\n"
    "    os.setgroups([])\n"
    "    os.setgid(uid)\n"
    "    os.setuid(uid)\n"
    "os.makedirs('tmp', mode=0o700, exist_ok=True)\n"
    "os.execv('/bin/sh', ['sh', '-c', sys.argv[6]])\n"
)


class UnconfinedSandbox:
    """Commands as plain subprocesses (``CHATGATE_SANDBOX=none``)."""

    name: BackendName = "none"
    network: Network = "full"

    async def probe(self) -> None:
        """Nothing to check: a subprocess always works."""

    async def run(
        self, command: str, *, scratch: Path, limits: SandboxLimits, files: Path | None = None
    ) -> str:
        """Run ``command`` under rlimits in ``scratch`` (``files`` is reachable where it
        lies: nothing here is a boundary)."""
        return await run_process(
            [
                sys.executable,
                "-S",
                "-c",
                _LAUNCHER,
                str(limits.cpu_seconds),
                str(limits.memory_mb * 1024 * 1024),
                str(limits.file_size_mb * 1024 * 1024),
                str(limits.processes),
                str(NOBODY),
                command,
            ],
            env={
                "PATH": SEARCH_PATH,
                "HOME": str(scratch),
                "TMPDIR": str(scratch / "tmp"),
                "LANG": "C.UTF-8",
            },
            limits=limits,
            cwd=scratch,
        )

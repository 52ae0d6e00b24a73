"""The ``container`` backend: each command in a throwaway podman or docker container.

For hosts where bubblewrap cannot make namespaces (a container runtime that blocks user
namespaces) but a container engine is at hand. Each command gets ``--rm``, no network
(``--network none`` unless the operator opted in), a read-only root, no capabilities,
``no-new-privileges``, a process and memory cap, a small ``/tmp`` and its conversation's
scratch directory at ``/scratch``. When the command returns, the container and every process
in it are gone; at the wall-clock limit the container is removed by name.

The image is the operator's (``[tools.run_command] image``); it must already be present
(the probe does not pull). The scratch directory is mounted by its host path, so the engine
must see the same filesystem as chatgate.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path

import structlog

from agent_core.sandbox.base import (
    FILES_INSIDE,
    PROBE,
    PROBE_COMMAND,
    PROBE_RESULT,
    SCRATCH_INSIDE,
    SEARCH_PATH,
    BackendName,
    Network,
    SandboxLimits,
    SandboxUnavailable,
    run_process,
    sandbox_uid,
    scratch_dir,
    shell_status,
)

log = structlog.get_logger("chatgate.sandbox")

CLIS = ("podman", "docker")
# How long an engine command other than ``run`` may take (inspect, rm).
_ENGINE_TIMEOUT = 30.0
# What the engine's command line needs from chatgate's environment; nothing else is passed.
_CLI_ENV = (
    "HOME",
    "XDG_RUNTIME_DIR",
    "DOCKER_HOST",
    "DOCKER_CONTEXT",
    "DOCKER_CONFIG",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
    "CONTAINER_HOST",
    "CONTAINERS_CONF",
)


class ContainerSandbox:
    """Commands in podman or docker containers."""

    name: BackendName = "container"

    def __init__(
        self,
        *,
        state_dir: Path,
        cli: str,
        image: str,
        network: Network = "none",
        environ: Mapping[str, str] = {},
    ) -> None:
        self.network = network
        self._state_dir = state_dir
        self._cli = cli
        self._image = image
        # The engine's command line gets what it needs of chatgate's environment, no more.
        self._env = {k: v for k, v in environ.items() if k in _CLI_ENV}
        self._env["PATH"] = environ.get("PATH", SEARCH_PATH)

    @property
    def cli(self) -> str:
        """The engine's command (``podman`` or ``docker``, or a path)."""
        return self._cli

    async def probe(self) -> None:
        """The engine answers, has the image, and runs a command that writes its scratch."""
        if shutil.which(self._cli, path=self._env["PATH"]) is None:
            raise SandboxUnavailable(
                "container", f"{self._cli} is not installed", "install podman or docker"
            )
        found = await self._quiet("image", "inspect", "--format", "{{.Id}}", self._image)
        if found is None:
            raise SandboxUnavailable(
                "container",
                f"{self._cli} cannot find the image {self._image} (or its engine is not running)",
                f"start the engine and run `{self._cli} pull {self._image}`, or set "
                "[tools.run_command] image",
            )
        scratch = scratch_dir(self._state_dir, PROBE)
        limits = SandboxLimits(timeout=60, output_limit=2000)
        result = await self.run(PROBE_COMMAND, scratch=scratch, limits=limits)
        if result != PROBE_RESULT:
            raise SandboxUnavailable(
                "container",
                f"a test command failed: {result.strip()}",
                f"check that `{self._cli} run` works for chatgate's user",
            )

    def argv(
        self,
        command: str,
        *,
        scratch: Path,
        limits: SandboxLimits,
        name: str,
        files: Path | None = None,
    ) -> list[str]:
        """The engine's command line for ``command``."""
        uid = sandbox_uid()
        return [
            self._cli,
            "run",
            "--rm",
            "--name",
            name,
            "--network",
            "none" if self.network == "none" else "bridge",
            "--read-only",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--pids-limit",
            str(limits.processes),
            "--memory",
            f"{limits.memory_mb}m",
            "--memory-swap",
            f"{limits.memory_mb}m",
            "--ulimit",
            f"cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}",
            "--ulimit",
            f"fsize={limits.file_size_mb * 1024 * 1024}",
            "--ulimit",
            "core=0",
            "--user",
            f"{uid}:{uid}",
            "--tmpfs",
            f"/tmp:rw,nosuid,nodev,size={limits.tmp_mb}m,mode=1777",
            "--volume",
            f"{scratch}:{SCRATCH_INSIDE}:rw",
            *(["--volume", f"{files}:{FILES_INSIDE}:ro"] if files is not None else []),
            "--workdir",
            SCRATCH_INSIDE,
            "--env",
            f"PATH={SEARCH_PATH}",
            "--env",
            f"HOME={SCRATCH_INSIDE}",
            "--env",
            "TMPDIR=/tmp",
            "--env",
            "LANG=C.UTF-8",
            "--log-driver",
            "none",
            self._image,
            "/bin/sh",
            "-c",
            command,
        ]

    async def run(
        self, command: str, *, scratch: Path, limits: SandboxLimits, files: Path | None = None
    ) -> str:
        """Run ``command`` in a new container; remove it at the wall-clock limit."""
        name = f"chatgate-{uuid.uuid4().hex[:16]}"

        async def remove() -> None:
            if await self._quiet("rm", "--force", name) is None:
                log.warning("could not remove a timed-out container", container=name)

        return await run_process(
            self.argv(command, scratch=scratch, limits=limits, name=name, files=files),
            env=self._env,
            limits=limits,
            cwd=Path("/"),
            on_timeout=remove,
            status_of=shell_status,
        )

    async def _quiet(self, *args: str) -> str | None:
        """Run an engine command; its output, or None when it fails or hangs."""
        try:
            process = await asyncio.create_subprocess_exec(
                self._cli,
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                env=self._env,
            )
        except OSError:
            return None
        try:
            async with asyncio.timeout(_ENGINE_TIMEOUT):
                out, _ = await process.communicate()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            return None
        return out.decode(errors="replace") if process.returncode == 0 else None

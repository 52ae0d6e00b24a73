"""Choosing the backend: the one the operator named, or (``auto``) the first that works.

A backend is checked once, at start, by running a real command in it. ``auto`` tries
bubblewrap, then podman, then docker; when none works, ``run_command`` is not offered at all
rather than run without a boundary. ``none`` is used only when the operator names it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeAlias

from agent_core.sandbox.base import Network, Sandbox, SandboxUnavailable
from agent_core.sandbox.bwrap import BwrapSandbox
from agent_core.sandbox.container import CLIS, ContainerSandbox
from agent_core.sandbox.unconfined import UnconfinedSandbox

SandboxMode: TypeAlias = Literal["auto", "bwrap", "container", "none"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxConfig:
    """What the operator set (``CHATGATE_SANDBOX`` and ``[tools.run_command]``)."""

    mode: SandboxMode = "auto"
    state_dir: Path
    network: Network = "none"
    bwrap: str = "bwrap"
    # None: podman if installed, else docker.
    container_engine: str | None = None
    image: str = "debian:bookworm-slim"
    # chatgate's own files (configuration, database, state directory): never shown.
    hidden: Sequence[Path] = ()
    # The environment the container engine's command line may need (DOCKER_HOST, ...).
    environ: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxChoice:
    """The backend in use (None: ``run_command`` is not offered) and what did not work."""

    sandbox: Sandbox | None
    failures: tuple[SandboxUnavailable, ...] = ()

    def fix(self) -> str:
        """How to get a working boundary, from the first failure."""
        if not self.failures:
            return ""
        return self.failures[0].fix

    def reasons(self) -> str:
        """Every failure, in the order tried."""
        return "; ".join(str(failure) for failure in self.failures)


def candidates(config: SandboxConfig) -> list[Sandbox]:
    """The backends to try, in order."""
    bwrap = BwrapSandbox(
        state_dir=config.state_dir,
        binary=config.bwrap,
        network=config.network,
        hidden=config.hidden,
    )
    engines = [config.container_engine] if config.container_engine else list(CLIS)
    containers: list[Sandbox] = [
        ContainerSandbox(
            state_dir=config.state_dir,
            cli=engine,
            image=config.image,
            network=config.network,
            environ=config.environ,
        )
        for engine in engines
    ]
    match config.mode:
        case "none":
            return [UnconfinedSandbox()]
        case "bwrap":
            return [bwrap]
        case "container":
            return containers
        case "auto":
            return [bwrap, *containers]


async def choose_sandbox(config: SandboxConfig) -> SandboxChoice:
    """The first candidate whose probe passes."""
    failures: list[SandboxUnavailable] = []
    for sandbox in candidates(config):
        try:
            await sandbox.probe()
        except SandboxUnavailable as exc:
            failures.append(exc)
            continue
        return SandboxChoice(sandbox=sandbox, failures=tuple(failures))
    return SandboxChoice(sandbox=None, failures=tuple(failures))

"""The sandbox's start cost: one ``run_command`` of ``true`` through the bwrap backend vs
the unconfined one (``none``), run alternately in the same process. Bar: under 50 ms."""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from agent_core.sandbox.base import Sandbox, SandboxLimits, scratch_dir
from agent_core.sandbox.bwrap import BwrapSandbox
from agent_core.sandbox.unconfined import UnconfinedSandbox

RUNS = 40


async def _per_command(sandbox: Sandbox, scratch: Path, runs: int) -> list[float]:
    limits = SandboxLimits(timeout=30)
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        result = await sandbox.run("true", scratch=scratch, limits=limits)
        samples.append(time.perf_counter() - started)
        assert result.startswith("exit code 0"), result
    return samples


async def _bench(state: Path) -> tuple[float, float]:
    bwrap = BwrapSandbox(state_dir=state)
    await bwrap.probe()
    unconfined = UnconfinedSandbox()
    scratch = scratch_dir(state, "bench")
    confined: list[float] = []
    plain: list[float] = []
    for _ in range(RUNS // 10):  # alternate, so both see the same machine load
        confined += await _per_command(bwrap, scratch, 10)
        plain += await _per_command(unconfined, scratch, 10)
    return statistics.median(confined), statistics.median(plain)


def bench_sandbox() -> None:
    """Print the median wall time per command, bwrap vs none."""
    with tempfile.TemporaryDirectory(dir="/var/tmp") as directory:
        Path(directory).chmod(0o711)
        confined, plain = asyncio.run(_bench(Path(directory) / "state"))
    verdict = "ok" if confined < 0.05 else "OVER 50 ms"
    print(
        f"sandbox start       {confined * 1000:7.1f} ms/cmd   none {plain * 1000:6.1f} ms/cmd"
        f"   ratio {confined / plain:5.2f}x   [{verdict}]"
    )

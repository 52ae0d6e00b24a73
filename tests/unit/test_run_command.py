"""run_command's sandbox: every limit holds, and no secret is in reach (the tests try)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent_core.events import ConversationKey
from agent_core.tools.base import ToolContext, TurnContext
from agent_core.tools.run_command import (
    SandboxLimits,
    run_command_factory,
    run_sandboxed,
    scratch_dir,
)

TURN = TurnContext(
    turn_id=1,
    conversation_id="conv1",
    conversation=ConversationKey(platform="web", workspace="local", channel="x"),
    user="web:local",
)


async def _run(command: str, tmp_path: Path, **limits: float) -> str:
    cwd = scratch_dir(tmp_path, "conv")
    return await run_sandboxed(command, cwd=cwd, limits=SandboxLimits(**limits))  # type: ignore[arg-type]


async def test_a_command_runs_and_reports_its_exit_code(tmp_path: Path) -> None:
    """Output and exit status come back."""
    result = await _run("echo hello; exit 3", tmp_path)
    assert result == "exit code 3\nhello\n"


async def test_wall_clock_limit_kills_the_whole_group(tmp_path: Path) -> None:
    """A sleeping command and its children die at the time limit."""
    result = await _run("sleep 30 & sleep 30; echo never", tmp_path, timeout=0.5)
    assert result.startswith("killed after 0.5s")
    assert "never" not in result


async def test_cpu_limit_stops_a_busy_loop(tmp_path: Path) -> None:
    """An endless computation is stopped by the CPU rlimit."""
    result = await _run("while :; do :; done", tmp_path, cpu_seconds=1, timeout=20)
    assert result.startswith("killed by SIGXCPU") or result.startswith("killed by SIGKILL")


async def test_memory_limit_refuses_a_large_allocation(tmp_path: Path) -> None:
    """Allocating past the address-space limit fails inside the command."""
    python = "python3 -c 'b = bytearray(400 * 1024 * 1024); print(len(b))'"
    result = await _run(python, tmp_path, memory_mb=128)
    assert "MemoryError" in result
    assert "419430400" not in result


async def test_output_is_capped_with_head_and_tail(tmp_path: Path) -> None:
    """A flood of output keeps its start and end and states the total."""
    result = await _run(
        "echo START; yes | head -c 5000000; echo; echo END", tmp_path, output_limit=600
    )
    assert "START" in result
    assert result.rstrip().endswith("END")
    # 5,000,011 bytes, plus whatever `yes` says about its broken pipe.
    assert re.search(r"omitted of 50000\d\d ", result)
    assert len(result) < 900


async def test_the_environment_holds_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Secrets and chatgate settings in our environment are invisible to the command."""
    monkeypatch.setenv("GITHUB_TOKEN", "canary-4b1d")
    monkeypatch.setenv("CHATGATE_MODEL_API_KEY", "canary-model-key")
    result = await _run("env; cat /proc/self/environ | tr '\\0' '\\n'", tmp_path)
    assert "canary" not in result
    assert "CHATGATE" not in result
    assert "PATH=/usr/local/bin:/usr/bin:/bin" in result
    assert os.environ["GITHUB_TOKEN"] == "canary-4b1d"


def test_the_gateways_own_environment_is_out_of_reach(tmp_path: Path) -> None:
    """A gateway started with a secret in its environment: the command cannot read it from
    /proc/<gateway>/environ, nor any file the gateway keeps private."""
    private = tmp_path / "private.txt"
    private.write_text("canary-file")
    private.chmod(0o600)
    script = (
        "import asyncio, pathlib\n"
        "from agent_core.tools.run_command import SandboxLimits, run_sandboxed, scratch_dir\n"
        f"cwd = scratch_dir(pathlib.Path({str(tmp_path)!r}), 'c')\n"
        "command = 'cat /proc/$PPID/environ; cat /proc/*/environ; cat " + str(private) + "'\n"
        "print(asyncio.run(run_sandboxed(command, cwd=cwd, limits=SandboxLimits())))\n"
    )
    environment = {**os.environ, "GITHUB_TOKEN": "canary-in-environ"}
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=environment,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "canary-in-environ" not in result.stdout
    assert "canary-file" not in result.stdout
    if os.getuid() == 0:
        assert "Permission denied" in result.stdout


async def test_each_conversation_gets_its_own_scratch_directory(tmp_path: Path) -> None:
    """Files written in one conversation's scratch directory stay there."""
    build = run_command_factory(tmp_path, SandboxLimits())
    (tool,) = build(TURN)
    context = ToolContext(turn=TURN, call_id="c", idempotency_key="1:2")
    outcome = await tool.run(tool.validate({"command": "pwd; echo hi > note.txt"}), context)
    assert outcome.status == "ok"
    assert str(tmp_path / "scratch" / "conv1") in outcome.output
    assert (tmp_path / "scratch" / "conv1" / "note.txt").read_text() == "hi\n"
    assert tool.is_idempotent({"command": "ls"}) is False


@pytest.mark.skipif(
    os.getuid() != 0, reason="the process limit applies when commands run as nobody"
)
async def test_a_fork_bomb_hits_the_process_limit(tmp_path: Path) -> None:
    """Spawning hundreds of processes fails past the limit (256) instead of filling the machine."""
    result = await _run(
        "for i in $(seq 400); do sleep 3 & done; wait; echo finished", tmp_path, timeout=20
    )
    assert "Cannot fork" in result or "Resource temporarily unavailable" in result
    assert _live_processes_of(65534) == []


def _live_processes_of(uid: int) -> list[str]:
    """Processes of a user that are not zombies (a zombie is dead, just not reaped)."""
    live = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines())
        except (OSError, ValueError):
            continue
        if fields.get("Uid", "").split()[:1] == [str(uid)] and not fields[
            "State"
        ].strip().startswith("Z"):
            live.append(fields["Name"].strip())
    return live

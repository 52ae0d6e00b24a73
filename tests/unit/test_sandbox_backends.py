"""The other two backends: ``none`` (a plain subprocess, only by name) and ``container``
(podman or docker; here against a fake engine command line, as no engine runs here)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import sys
import time
from pathlib import Path

import pytest

from agent_core.sandbox.base import SandboxLimits, SandboxUnavailable, scratch_dir
from agent_core.sandbox.container import ContainerSandbox
from agent_core.sandbox.unconfined import UnconfinedSandbox
from tests.fakes import container_engine

FAKE = Path(container_engine.__file__)


async def test_none_runs_the_command_under_its_limits(tmp_path: Path) -> None:
    """Exit code, output, CPU and memory limits, no secret in the environment."""
    sandbox = UnconfinedSandbox()
    scratch = scratch_dir(tmp_path, "c1")
    os.environ["GITHUB_TOKEN_FOR_TEST"] = "canary-4b1d"
    try:
        result = await sandbox.run(
            "pwd; env; exit 3", scratch=scratch, limits=SandboxLimits(output_limit=4000)
        )
    finally:
        del os.environ["GITHUB_TOKEN_FOR_TEST"]
    assert result.startswith(f"exit code 3\n{scratch}\n")
    assert "canary" not in result
    assert "TMPDIR=" in result
    busy = await sandbox.run(
        "while :; do :; done", scratch=scratch, limits=SandboxLimits(cpu_seconds=1)
    )
    assert busy.startswith(("killed by SIGXCPU", "killed by SIGKILL"))
    memory = await sandbox.run(
        "python3 -c 'bytearray(400 * 1024 * 1024)'",
        scratch=scratch,
        limits=SandboxLimits(memory_mb=128),
    )
    assert "MemoryError" in memory


@pytest.fixture
def engine(tmp_path: Path) -> Path:
    """A copy of the fake engine, executable, with its own call log."""
    directory = tmp_path / "engine"
    directory.mkdir()
    path = directory / "fake-docker"
    path.write_text(f"#!{sys.executable}\n" + FAKE.read_text())
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _calls(engine: Path) -> list[list[str]]:
    log = engine.parent / "calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def test_container_probe_checks_the_image_and_runs_a_command(
    engine: Path, tmp_path: Path
) -> None:
    """The probe asks for the image without pulling and runs a command in a container."""
    sandbox = ContainerSandbox(
        state_dir=tmp_path / "state", cli=str(engine), image=container_engine.IMAGE
    )
    await sandbox.probe()
    calls = _calls(engine)
    assert calls[0] == ["image", "inspect", "--format", "{{.Id}}", container_engine.IMAGE]
    assert calls[1][0] == "run"
    assert not any(call[0] == "pull" for call in calls)


async def test_container_command_line_is_locked_down(engine: Path, tmp_path: Path) -> None:
    """--rm, no network, read-only root, no capabilities, no-new-privileges, a process and
    memory cap, the scratch directory alone mounted, nothing of our environment passed."""
    os.environ["CHATGATE_MODEL_API_KEY_FOR_TEST"] = "canary"
    try:
        sandbox = ContainerSandbox(
            state_dir=tmp_path, cli=str(engine), image="img", environ=dict(os.environ)
        )
    finally:
        del os.environ["CHATGATE_MODEL_API_KEY_FOR_TEST"]
    scratch = scratch_dir(tmp_path, "c1")
    argv = sandbox.argv(
        "echo hi", scratch=scratch, limits=SandboxLimits(processes=32, memory_mb=256), name="n1"
    )
    text = " ".join(argv)
    for expected in (
        "run --rm --name n1",
        "--network none",
        "--read-only",
        "--cap-drop ALL",
        "--security-opt no-new-privileges",
        "--pids-limit 32",
        "--memory 256m --memory-swap 256m",
        f"--volume {scratch}:/scratch:rw",
        "--workdir /scratch",
        "img /bin/sh -c echo hi",
    ):
        assert expected in text
    assert argv.count("--volume") == 1
    assert "canary" not in text
    assert "canary" not in json.dumps(sandbox._env)


async def test_container_timeout_removes_the_container(engine: Path, tmp_path: Path) -> None:
    """At the wall-clock limit the container is removed by name and its command ends."""
    sandbox = ContainerSandbox(state_dir=tmp_path, cli=str(engine), image=container_engine.IMAGE)
    marker = f"sleep {30000 + os.getpid() % 1000}"
    result = await sandbox.run(
        marker, scratch=scratch_dir(tmp_path, "c1"), limits=SandboxLimits(timeout=0.5)
    )
    assert result.startswith("killed after 0.5s")
    run, removal = _calls(engine)[-2:]
    assert removal == ["rm", "--force", run[run.index("--name") + 1]]
    deadline = time.monotonic() + 5
    while _running(marker) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not _running(marker)


def _running(marker: str) -> bool:
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker in cmdline.read_bytes().replace(b"\0", b" ").decode():
                return True
        except OSError:
            continue
    return False


async def test_container_probe_fails_without_an_engine(engine: Path, tmp_path: Path) -> None:
    """No such command, an image that is not there, and (where docker's client is
    installed, as here) a client whose engine is not running: each says what to do."""
    missing = ContainerSandbox(state_dir=tmp_path, cli="/nonexistent/podman", image="img")
    with pytest.raises(SandboxUnavailable, match="not installed"):
        await missing.probe()
    no_image = ContainerSandbox(state_dir=tmp_path, cli=str(engine), image="nope:1")
    with pytest.raises(SandboxUnavailable) as raised:
        await no_image.probe()
    assert "pull nope:1" in raised.value.fix
    if shutil.which("docker"):
        client = ContainerSandbox(state_dir=tmp_path, cli="docker", image="debian:bookworm-slim")
        with pytest.raises(SandboxUnavailable):
            await client.probe()

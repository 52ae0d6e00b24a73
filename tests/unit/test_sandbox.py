"""run_command's bwrap sandbox, tried as an attacker would: every limit and wall holds.

Each test runs real commands in real bubblewrap namespaces (``scripts/ensure-bubblewrap``
installs it for ``make test``). When the suite runs as root the commands run as nobody.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from agent_core.sandbox import seccomp
from agent_core.sandbox.base import (
    PROBE,
    SandboxLimits,
    SandboxUnavailable,
    inbox_dir,
    make_inbox,
    scratch_dir,
)
from agent_core.sandbox.bwrap import SYSTEM, BwrapSandbox
from agent_core.sandbox.choose import SandboxConfig, choose_sandbox

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A state directory (its parents are reachable for nobody: see tests/conftest.py)."""
    path = tmp_path / "state"
    path.mkdir()
    return path


@pytest.fixture
async def bwrap(state: Path) -> BwrapSandbox:
    """The backend, probed."""
    sandbox = BwrapSandbox(state_dir=state)
    await sandbox.probe()
    return sandbox


async def _run(
    sandbox: BwrapSandbox, state: Path, command: str, conversation: str = "c1", **limits: float
) -> str:
    scratch = scratch_dir(state, conversation)
    return await sandbox.run(command, scratch=scratch, limits=SandboxLimits(**limits))  # type: ignore[arg-type]


def live_processes(marker: str) -> list[str]:
    """Command lines of live (not zombie) processes that contain ``marker``."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state_line = next(
                line for line in (entry / "status").read_text().splitlines() if line[:6] == "State:"
            )
        except (OSError, StopIteration):
            continue
        if marker in cmdline and "Z" not in state_line.split()[1]:
            found.append(cmdline)
    return found


async def wait_until_gone(marker: str, timeout: float = 5.0) -> list[str]:
    """Poll until no live process carries ``marker``; return what is left at the end."""
    deadline = time.monotonic() + timeout
    while (left := live_processes(marker)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return left


async def test_a_command_runs_in_its_scratch_directory(bwrap: BwrapSandbox, state: Path) -> None:
    """Output and exit status come back; the working directory and HOME are /scratch."""
    result = await _run(bwrap, state, "pwd; echo $HOME; echo hello; exit 3")
    assert result == "exit code 3\n/scratch\n/scratch\nhello\n"


async def test_files_stay_between_commands_of_a_conversation_and_no_further(
    bwrap: BwrapSandbox, state: Path
) -> None:
    """What one command leaves in /scratch the next reads; another conversation sees none
    of it, by any path."""
    assert (await _run(bwrap, state, "echo remembered > note")).startswith("exit code 0")
    assert await _run(bwrap, state, "cat note") == "exit code 0\nremembered\n"
    mine = scratch_dir(state, "c1")
    other = await _run(
        bwrap, state, f"cat /scratch/note; ls /scratch; cat {mine}/note; ls {state}", "c2"
    )
    assert "remembered" not in other
    assert other.startswith("exit code 2")


async def test_a_conversations_files_are_read_only_at_files_and_no_other_sees_them(
    bwrap: BwrapSandbox, state: Path
) -> None:
    """The files sent in a conversation (its inbox, which chatgate fills) are at /files for
    its commands, read-only; another conversation's commands see none of them by any
    path, and cannot replace them through a link in their own scratch directory."""
    # As chatgate runs: umask 077 (``hardening``); the inbox must still be nobody's to read.
    umask = os.umask(0o077)
    try:
        inbox = make_inbox(state, "c1")
        (inbox / "report.csv").write_text("north,4242\n")
    finally:
        os.umask(umask)
    (inbox / "report.csv").chmod(0o444)
    limits = SandboxLimits()
    run = functools.partial(bwrap.run, limits=limits)
    mine = await run(
        "cat /files/report.csv; echo x > /files/report.csv; rm -f /files/report.csv; "
        "touch /files/new; ls /files",
        scratch=scratch_dir(state, "c1"),
        files=inbox_dir(state, "c1"),
    )
    assert mine.count("north,4242") == 1
    assert "report.csv" in mine.splitlines()[-1]
    assert "new" not in mine.splitlines()[-1]
    assert (inbox / "report.csv").read_text() == "north,4242\n"
    other = await run(
        f"cat /files/report.csv; cat {inbox}/report.csv; ls {state}/inbox; "
        "ln -s /etc /scratch/files; ls /files",
        scratch=scratch_dir(state, "c2"),
        files=inbox_dir(state, "c2"),
    )
    assert inbox_dir(state, "c2") is None
    assert "north,4242" not in other
    assert (inbox / "report.csv").read_text() == "north,4242\n"


def _plant(path: Path, text: str) -> None:
    """A file anyone may read, in directories anyone may enter."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o644)
    for directory in path.parents:
        if directory == Path("/tmp"):
            break
        directory.chmod(0o755)


async def test_nothing_but_scratch_and_tmp_is_writable(bwrap: BwrapSandbox, state: Path) -> None:
    """The system is read-only and chatgate's files are not there, even when anyone may
    read them."""
    _plant(state / "chatgate.db", "every conversation")
    command = (
        "for p in /usr/x /etc/x /x /proc/x; do touch $p 2>/dev/null && echo wrote $p; done; "
        f"cat {state}/chatgate.db; ls {state.parent}; echo ok > /tmp/t && cat /tmp/t"
    )
    result = await _run(bwrap, state, command)
    assert "wrote" not in result
    assert "every conversation" not in result
    assert result.rstrip().endswith("ok")


async def test_a_state_directory_under_a_system_directory_is_masked(state: Path) -> None:
    """chatgate's files are covered where a bound system directory would show them."""
    system = state / "usr-like"
    _plant(system / "chatgate" / "chatgate.db", "secret rows")
    _plant(system / "chatgate.toml", "token = 'canary'")
    sandbox = BwrapSandbox(
        state_dir=state,
        system=(*SYSTEM, str(system)),
        hidden=(system / "chatgate", system / "chatgate.toml"),
    )
    await sandbox.probe()
    result = await _run(
        sandbox, state, f"ls {system}; cat {system}/chatgate/chatgate.db {system}/chatgate.toml"
    )
    assert "secret rows" not in result
    assert "canary" not in result
    assert "chatgate.toml" in result  # still listed: covered, not absent


async def test_no_network_not_even_loopback(bwrap: BwrapSandbox, state: Path) -> None:
    """A port listening on the host's 127.0.0.1 cannot be reached."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        probe = (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "    print('CONNECTED')\n"
            "except OSError as exc:\n"
            "    print('refused', exc)\n"
        )
        result = await _run(bwrap, state, f'python3 -c "{probe}"; cat /proc/net/route')
    assert "CONNECTED" not in result
    assert "refused" in result


async def test_no_secret_in_reach_of_any_process(
    bwrap: BwrapSandbox, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our environment is in no /proc/*/environ of the sandbox, bwrap's own included."""
    monkeypatch.setenv("GITHUB_TOKEN", "canary-4b1d")
    monkeypatch.setenv("CHATGATE_MODEL_API_KEY", "canary-model-key")
    result = await _run(bwrap, state, "env; cat /proc/*/environ | tr '\\0' '\\n'; ps -eo pid,args")
    assert "canary" not in result
    assert "CHATGATE" not in result
    assert "PATH=/usr/local/bin:/usr/bin:/bin" in result
    # Only the sandbox's own processes are there: bwrap as PID 1, the command, ps.
    assert len([line for line in result.splitlines() if line.strip()[:1].isdigit()]) <= 5


async def test_every_process_ends_when_the_command_returns(
    bwrap: BwrapSandbox, state: Path
) -> None:
    """setsid, nohup and & do not outlive the command."""
    marker = str(4000 + uuid.uuid4().int % 5000)
    command = (
        f"setsid sleep {marker} & nohup sleep {marker} >/dev/null 2>&1 & "
        f"(sleep {marker} &) ; sleep 0.2; echo started"
    )
    started = time.monotonic()
    result = await _run(bwrap, state, command, timeout=20)
    assert result == "exit code 0\nstarted\n"
    assert time.monotonic() - started < 10
    assert await wait_until_gone(f"sleep {marker}") == []


async def test_the_wall_clock_limit_ends_everything(bwrap: BwrapSandbox, state: Path) -> None:
    """At the time limit the command and all it started are killed."""
    marker = str(10000 + uuid.uuid4().int % 5000)
    result = await _run(
        bwrap, state, f"setsid sleep {marker} & sleep {marker}; echo never", timeout=0.5
    )
    assert result.startswith("killed after 0.5s")
    assert "never" not in result
    assert await wait_until_gone(f"sleep {marker}") == []


async def test_a_fork_bomb_hits_the_process_limit_and_others_still_run(
    bwrap: BwrapSandbox, state: Path
) -> None:
    """The process limit counts this command's processes only (its own user namespace): a
    bomb fails to fork, another command runs meanwhile, and nothing is left after."""
    bomb = asyncio.create_task(
        _run(bwrap, state, "bomb() { bomb | bomb & }; bomb; sleep 2; echo done", timeout=15)
    )
    await asyncio.sleep(0.5)
    other = await _run(bwrap, state, "echo still here", "c2")
    result = await bomb
    assert other == "exit code 0\nstill here\n"
    assert "fork" in result.lower() or "resource temporarily unavailable" in result.lower()
    assert await wait_until_gone("bomb()") == []


async def test_cpu_memory_and_file_size_limits(bwrap: BwrapSandbox, state: Path) -> None:
    """A busy loop is stopped by the CPU limit, a 2 GiB allocation fails, and so does a
    file past the size limit."""
    busy = await _run(bwrap, state, "while :; do :; done", cpu_seconds=1, timeout=20)
    assert busy.startswith(("killed by SIGXCPU", "killed by SIGKILL"))
    memory = await _run(
        bwrap, state, "python3 -c 'b = bytearray(2 * 1024**3); print(len(b))'", memory_mb=256
    )
    assert "MemoryError" in memory
    assert str(2 * 1024**3) not in memory
    big = await _run(bwrap, state, "head -c 3000000 /dev/zero > big; wc -c < big", file_size_mb=1)
    assert "File size limit exceeded" in big
    assert big.rstrip().endswith("\n1048576")
    tmp = await _run(bwrap, state, "head -c 3000000 /dev/zero > /tmp/big", tmp_mb=1)
    assert "No space left on device" in tmp
    shm = await _run(bwrap, state, "head -c 3000000 /dev/zero > /dev/shm/big", tmp_mb=1)
    assert "No space left on device" in shm
    dev = await _run(bwrap, state, "echo x > /dev/big; echo x > /dev/null && echo null-ok")
    assert "Read-only file system" in dev
    assert "null-ok" in dev


async def test_no_ptrace_no_keyring_no_process_memory(bwrap: BwrapSandbox, state: Path) -> None:
    """The seccomp filter refuses what reaches across processes or into kernel state
    shared by every sandbox of the same host user: ptrace (of bwrap's PID 1 too),
    process_vm_readv, the keyring."""
    probe = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "for name, number, args in (('ptrace', 101, (16, 1, 0, 0)),"
        " ('process_vm_readv', 310, (1, 0, 0, 0, 0, 0)),"
        " ('add_key', 248, (b'user', b'k', b'v', 1, -3)), ('keyctl', 250, (0, -3, 0, 0))):\n"
        "    result = libc.syscall(number, *args)\n"
        "    print(name, result, os.strerror(ctypes.get_errno()))\n"
    )
    if os.uname().machine != "x86_64":
        pytest.skip("the syscall numbers in this probe are x86_64's")
    result = await _run(bwrap, state, f'python3 -c "{probe}"')
    for name in ("ptrace", "process_vm_readv", "add_key", "keyctl"):
        assert f"{name} -1 Operation not permitted" in result


async def test_the_time_limit_holds_even_if_pid_1_is_told_to_stay(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the seccomp filter taken away, a command that ptraces bwrap's PID 1 and clears
    its die-with-parent signal still ends at the time limit: chatgate kills PID 1 itself."""
    assert shutil.which("gdb"), "this test needs gdb (Debian's gdb package)"
    monkeypatch.setattr(seccomp, "program", lambda machine=None: None)
    sandbox = BwrapSandbox(state_dir=state)
    await sandbox.probe()
    marker = str(25000 + uuid.uuid4().int % 5000)
    command = f"gdb -p 1 -batch -ex 'call (int)prctl(1, 0, 0, 0, 0)'; sleep {marker}"
    result = await _run(sandbox, state, command, timeout=5)
    assert await wait_until_gone(f"sleep {marker}") == []
    if "$1 = 0" not in result and "Couldn't write extended state status" in result:
        # Some kernels refuse gdb's write of the registers it needs to make the call (seen
        # on a machine whose CPU has extended state gdb 13 cannot write back): the attack
        # cannot be mounted there, so what it proves is not shown either.
        pytest.skip("gdb cannot call into a process on this machine (extended state)")
    assert result.startswith("killed after 5s")
    assert "$1 = 0" in result  # the attack itself worked


async def test_the_command_text_is_on_no_command_line(bwrap: BwrapSandbox, state: Path) -> None:
    """Other users of the host see neither the command nor the scratch path in ``ps``."""
    marker = f"canary-{uuid.uuid4().hex[:8]}"
    running = asyncio.create_task(_run(bwrap, state, f"X={marker}; sleep 1.5; echo $X"))
    await asyncio.sleep(0.7)
    seen = live_processes(marker) + live_processes(str(scratch_dir(state, "c1")))
    assert (await running).endswith(f"{marker}\n")
    assert seen == []


def test_as_root_other_users_cannot_reach_scratch_directories(state: Path) -> None:
    """Only nobody's group may enter the directories above the scratch directories, so a
    command that opens its own directory wide still exposes nothing to other local users."""
    if os.getuid() != 0:
        pytest.skip("as another user chatgate's state directory is its own (0700)")
    scratch = scratch_dir(state, "c1")
    scratch.chmod(0o755)
    (scratch / "note").write_text("private")
    (scratch / "note").chmod(0o644)
    other = subprocess.run(
        ["setpriv", "--reuid=4242", "--regid=4242", "--clear-groups", "cat", str(scratch / "note")],
        capture_output=True,
        text=True,
    )
    assert other.returncode != 0
    assert "Permission denied" in other.stderr


async def test_output_is_capped_with_head_and_tail(bwrap: BwrapSandbox, state: Path) -> None:
    """A flood of output keeps its start and end and states the total."""
    result = await _run(
        bwrap, state, "echo START; yes | head -c 5000000; echo; echo END", output_limit=600
    )
    assert "START" in result
    assert result.rstrip().endswith("END")
    assert "omitted of 50000" in result
    assert len(result) < 900


def test_the_sandbox_dies_with_the_process_that_started_it(state: Path) -> None:
    """chatgate killed with SIGKILL mid-command: bwrap and the command die with it."""
    marker = str(20000 + uuid.uuid4().int % 5000)
    script = (
        "import asyncio, pathlib\n"
        "from agent_core.sandbox.base import SandboxLimits, scratch_dir\n"
        "from agent_core.sandbox.bwrap import BwrapSandbox\n"
        f"state = pathlib.Path({str(state)!r})\n"
        "sandbox = BwrapSandbox(state_dir=state)\n"
        f"command = 'setsid sleep {marker} & sleep {marker}'\n"
        "asyncio.run(sandbox.run(command, scratch=scratch_dir(state, 'c1'),"
        " limits=SandboxLimits(timeout=60)))\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    try:
        deadline = time.monotonic() + 20
        while len(live_processes(f"sleep {marker}")) < 2:
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        deadline = time.monotonic() + 5
        while live_processes(f"sleep {marker}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert live_processes(f"sleep {marker}") == []
    finally:
        process.kill()
        process.wait()


async def test_a_missing_binary_is_reported_with_the_fix(state: Path) -> None:
    """The probe fails on a bwrap that is not there, saying how to get one."""
    sandbox = BwrapSandbox(state_dir=state, binary="/nonexistent/bwrap")
    with pytest.raises(SandboxUnavailable) as raised:
        await sandbox.probe()
    assert "not installed" in raised.value.reason
    assert "apt-get install bubblewrap" in raised.value.fix


async def test_auto_picks_bwrap_and_none_is_only_chosen_by_name(state: Path) -> None:
    """auto finds bwrap here; with no bwrap and no engine nothing is chosen (never an
    unconfined fallback); none is what the operator names."""
    found = await choose_sandbox(SandboxConfig(state_dir=state))
    assert found.sandbox is not None
    assert found.sandbox.name == "bwrap"
    nothing = await choose_sandbox(
        SandboxConfig(
            state_dir=state, bwrap="/nonexistent/bwrap", container_engine="/nonexistent/podman"
        )
    )
    assert nothing.sandbox is None
    assert [f.backend for f in nothing.failures] == ["bwrap", "container"]
    assert "bubblewrap" in nothing.fix()
    named = await choose_sandbox(SandboxConfig(state_dir=state, mode="none"))
    assert named.sandbox is not None
    assert named.sandbox.name == "none"
    assert (state / "scratch" / PROBE).is_dir()

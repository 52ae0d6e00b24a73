"""The sandbox port: where ``run_command`` runs a shell command, and what every backend shares.

A backend (``bwrap``, ``container``, ``none``) turns a command, a conversation's scratch
directory and the limits into a process; this module runs that process: it keeps the head
and tail of its output, ends it at the wall-clock limit and says how it ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, TypeAlias

BackendName: TypeAlias = Literal["bwrap", "container", "none"]
Network: TypeAlias = Literal["none", "full"]

# Used for the sandboxed commands when chatgate runs as root.
NOBODY = 65534
# Where the conversation's scratch directory appears inside bwrap and containers.
SCRATCH_INSIDE = "/scratch"
# Where the files people sent in the conversation appear, read-only (``inbox_dir``).
FILES_INSIDE = "/files"
SEARCH_PATH = "/usr/local/bin:/usr/bin:/bin"
# After the command ends, how long its last output may take to arrive.
_DRAIN = 0.2
_CONVERSATION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
# A backend's probe: this command, in this scratch directory (no conversation id starts
# with _), must give this result.
PROBE = "_probe"
PROBE_COMMAND = "echo ok > probe && cat probe && rm probe"
PROBE_RESULT = "exit code 0\nok\n"


class SandboxUnavailable(Exception):
    """The backend cannot run commands on this host; ``fix`` says how to get one."""

    def __init__(self, backend: str, reason: str, fix: str) -> None:
        super().__init__(backend, reason, fix)
        self.backend = backend
        self.reason = reason
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.backend}: {self.reason}"


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxLimits:
    """How much one command may use."""

    timeout: float = 30.0
    cpu_seconds: int = 20
    memory_mb: int = 512
    processes: int = 64
    file_size_mb: int = 64
    tmp_mb: int = 64
    output_limit: int = 8_000


class Sandbox(Protocol):
    """Runs one shell command inside a boundary."""

    @property
    def name(self) -> BackendName:
        """``bwrap``, ``container`` or ``none``."""
        ...

    @property
    def network(self) -> Network:
        """Whether commands may open network connections."""
        ...

    async def probe(self) -> None:
        """Run a command the way ``run`` would; raise :class:`SandboxUnavailable` if it fails."""
        ...

    async def run(
        self, command: str, *, scratch: Path, limits: SandboxLimits, files: Path | None = None
    ) -> str:
        """Run ``command`` with ``scratch`` writable and ``files`` (the conversation's
        inbox, when it has one) read-only at ``FILES_INSIDE``; return how it ended and its
        output."""
        ...


def sandbox_uid() -> int:
    """The uid commands run as: chatgate's own, or nobody when chatgate runs as root (root
    inside a namespace is still root to the kernel's process limits)."""
    return NOBODY if os.getuid() == 0 else os.getuid()


def scratch_dir(root: Path, conversation_id: str) -> Path:
    """The conversation's working directory, created on first use (owned by the sandbox's
    uid).

    As root, the directories above it may be entered by nobody's group alone (nobody
    needs to reach its own directory through them; no other local user may, so nothing a
    command leaves there, a set-uid program say, is in their reach). Nothing inside it is
    touched here: a command controls what lies there, symbolic links included."""
    if conversation_id != PROBE and not _CONVERSATION_ID.fullmatch(conversation_id):
        raise ValueError(f"not a conversation id: {conversation_id!r}")
    base = root / "scratch"
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    if os.getuid() == 0:
        for directory in (root, base):
            os.chown(directory, 0, NOBODY, follow_symlinks=False)
            directory.chmod(0o710)
    path = base / conversation_id
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        if path.is_symlink() or not path.is_dir():
            raise ValueError(f"{path} is not a directory") from None
        return path
    if os.getuid() == 0:
        os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    return path


def inbox_dir(root: Path, conversation_id: str) -> Path | None:
    """The files people sent in the conversation (``make_inbox``), None when none came."""
    if not _CONVERSATION_ID.fullmatch(conversation_id):
        raise ValueError(f"not a conversation id: {conversation_id!r}")
    path = root / "inbox" / conversation_id
    return path if path.is_dir() and not path.is_symlink() else None


def make_inbox(root: Path, conversation_id: str) -> Path:
    """The conversation's inbox, made on first use: written by chatgate only, never by a
    command (it lies beside the scratch directories, not in one); readable by the
    sandbox's uid."""
    if not _CONVERSATION_ID.fullmatch(conversation_id):
        raise ValueError(f"not a conversation id: {conversation_id!r}")
    base = root / "inbox"
    path = base / conversation_id
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.mkdir(mode=0o700, exist_ok=True)
    if path.is_symlink() or not path.is_dir():
        raise ValueError(f"{path} is not a directory")
    if os.getuid() == 0:
        # Explicitly: the process's umask (077, see ``hardening``) must not leave nobody
        # outside, and no other local user may come in.
        for directory, mode in ((root, 0o710), (base, 0o710), (path, 0o750)):
            os.chown(directory, 0, NOBODY, follow_symlinks=False)
            directory.chmod(mode)
    return path


async def run_process(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    limits: SandboxLimits,
    cwd: Path | None = None,
    user: int | None = None,
    pass_fds: Sequence[int] = (),
    on_timeout: Callable[[], Awaitable[None]] | None = None,
    finished: Callable[[], None] | None = None,
    status_of: Callable[[int], str] | None = None,
) -> str:
    """Run ``argv`` in a new session; return its status line and its output (head and tail
    kept). At the wall-clock limit the whole session is killed, then ``on_timeout`` runs
    (a container is removed there). ``finished`` is called when the run ends, either way,
    once the session is killed. ``pass_fds`` are inherited by the process.

    The output pipe is ours, not the subprocess transport's: a process that escaped the
    session and still holds it (possible only without a sandbox) delays nothing."""
    extra: dict[str, object] = {}
    if user is not None and user != os.getuid():
        extra = {"user": user, "group": user, "extra_groups": []}
    read_end, write_end = os.pipe()
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=write_end,
            stderr=write_end,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
            **extra,  # type: ignore[arg-type]
        )
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    output = _Output(limits.output_limit)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_read_pipe(
        lambda: _Collect(output), os.fdopen(read_end, "rb", buffering=0)
    )
    timed_out = False
    try:
        async with asyncio.timeout(limits.timeout):
            await process.wait()
    except TimeoutError:
        timed_out = True
    else:
        # What the command wrote just before it ended is still on its way. (Only without a
        # sandbox can a process it left behind hold the pipe open: that is not waited for.)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_DRAIN):
                await output.closed.wait()
    finally:
        _kill_session(process.pid)
        if finished is not None:
            finished()
        transport.close()
        with contextlib.suppress(ProcessLookupError):
            await process.wait()
        if timed_out and on_timeout is not None:
            await asyncio.shield(on_timeout())
    text = output.text()
    if timed_out:
        return f"killed after {limits.timeout:g}s (wall-clock limit)\n{text}"
    assert process.returncode is not None
    describe = status_of or exit_status
    return f"{describe(process.returncode)}\n{text}"


class _Output:
    """The head and the tail of a stream, and its size."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.closed = asyncio.Event()

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if len(self.head) < self.keep:
            self.head += chunk[: self.keep - len(self.head)]
        self.tail = (self.tail + chunk)[-self.keep :]

    def text(self) -> str:
        """All of the output when it fits, else its head and tail with the size stated."""
        keep = self.keep
        if self.total <= keep:
            return bytes(self.head).decode(errors="replace")
        start, end = bytes(self.head[: keep * 2 // 3]), bytes(self.tail[-(keep // 3) :])
        omitted = self.total - len(start) - len(end)
        return (
            f"{start.decode(errors='replace')}\n[... {omitted} bytes omitted of "
            f"{self.total} ...]\n{end.decode(errors='replace')}"
        )


class _Collect(asyncio.Protocol):
    def __init__(self, output: _Output) -> None:
        self._output = output

    def data_received(self, data: bytes) -> None:
        self._output.add(data)

    def eof_received(self) -> bool:
        self._output.closed.set()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._output.closed.set()


def _kill_session(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


_WHY = {"SIGXCPU": " (CPU limit)", "SIGKILL": " (killed)", "SIGXFSZ": " (file size limit)"}


def exit_status(code: int) -> str:
    """A process's own exit status (a negative code: the signal that ended it)."""
    if code >= 0:
        return f"exit code {code}"
    return _killed_by(-code)


def shell_status(code: int) -> str:
    """An exit status passed on the way shells and bwrap do: 128 + N for signal N."""
    if 128 < code < 128 + signal.NSIG:
        with contextlib.suppress(ValueError):
            return _killed_by(code - 128)
    return f"exit code {code}"


def _killed_by(number: int) -> str:
    name = signal.Signals(number).name
    return f"killed by {name}{_WHY.get(name, '')}"

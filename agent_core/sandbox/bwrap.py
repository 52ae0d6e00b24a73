"""The ``bwrap`` backend: each command in fresh namespaces made by bubblewrap.

What a command sees: the system's ``/usr`` (read-only), a short list of ``/etc`` files
programs need, a private ``/proc`` (its own processes only), a minimal ``/dev``, a small
private ``/tmp``, and its conversation's scratch directory at ``/scratch``, the only place
it may write. Nothing of chatgate's state directory, configuration, database or environment
is there; with ``network = "none"`` it has no network at all, loopback included (its own
empty network namespace).

Its processes run in their own user and PID namespaces as an unprivileged user (nobody when
chatgate runs as root, else chatgate's own user), with no capabilities, and cannot make user
namespaces of their own. bwrap is PID 1 there: when the command returns, or when chatgate
kills bwrap at the wall-clock limit (or dies itself: ``--die-with-parent``), the kernel ends
every process left in the namespace, whatever it did with ``setsid``, ``nohup`` or ``&``.

Limits are set inside, by ``prlimit``, after the namespaces exist: the process limit then
counts this command's processes only (the kernel counts per user namespace), so one command's
fork bomb cannot starve another's, and it holds when chatgate runs as root too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
from collections.abc import Sequence
from pathlib import Path

from agent_core.sandbox import seccomp
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

# What programs commonly read from /etc; nothing of chatgate's is here.
ETC = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "gai.conf",
    "group",
    "host.conf",
    "hostname",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "protocols",
    "resolv.conf",
    "services",
    "ssl",
    "timezone",
)
# Read-only, as they are on the host (a symbolic link such as /bin -> usr/bin stays one).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The command's text, as a read-only file inside (never on a command line).
COMMAND_INSIDE = "/run/chatgate/command"
_OPEN_FILES = 1024
_FIX = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"


class BwrapSandbox:
    """Commands in bubblewrap namespaces."""

    name: BackendName = "bwrap"

    def __init__(
        self,
        *,
        state_dir: Path,
        binary: str = "bwrap",
        network: Network = "none",
        hidden: Sequence[Path] = (),
        system: Sequence[str] = SYSTEM,
    ) -> None:
        self.network = network
        self._binary = binary
        self._state_dir = state_dir
        self._system = tuple(system)
        # chatgate's own files: masked wherever a system directory would show them.
        self._hidden = tuple(path.resolve() for path in hidden)
        self._bwrap: str | None = None
        self._prlimit: str | None = None

    def _tools(self) -> tuple[str, str]:
        bwrap = shutil.which(self._binary)
        if bwrap is None:
            fix = _FIX
            if self._binary != "bwrap":
                fix = f"{fix}, or point [tools.run_command] bwrap at it"
            raise SandboxUnavailable("bwrap", f"{self._binary} is not installed", fix)
        prlimit = shutil.which("prlimit", path=SEARCH_PATH)
        if prlimit is None or not any(prlimit.startswith(f"{d}/") for d in self._system):
            raise SandboxUnavailable(
                "bwrap",
                "prlimit (util-linux) is missing from the system directories",
                "install util-linux",
            )
        return bwrap, prlimit

    async def probe(self) -> None:
        """Run a command that writes to its scratch directory, the way any command runs."""
        self._bwrap, self._prlimit = self._tools()
        try:
            scratch = scratch_dir(self._state_dir, PROBE)
        except OSError as exc:
            raise SandboxUnavailable(
                "bwrap", f"cannot make a scratch directory: {exc}", "check CHATGATE_STATE_DIR"
            ) from exc
        limits = SandboxLimits(timeout=15, output_limit=2000)
        result = await self.run(PROBE_COMMAND, scratch=scratch, limits=limits)
        if result != PROBE_RESULT:
            raise SandboxUnavailable(
                "bwrap",
                f"a test command failed: {result.strip()}",
                _fix_for(result, self._state_dir),
            )

    def arguments(
        self, *, scratch: Path, limits: SandboxLimits, fds: _Fds, files: Path | None = None
    ) -> list[str]:
        """bwrap's options (read from a file descriptor, so no host user sees them in
        ``ps``): the namespaces, the filesystem, the environment."""
        options = [
            "--unshare-all",
            *(["--share-net"] if self.network == "full" else []),
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--info-fd",
            str(fds.info),
        ]
        if fds.seccomp is not None:
            options += ["--seccomp", str(fds.seccomp)]
        for directory in self._system:
            path = Path(directory)
            if path.is_symlink():
                options += ["--symlink", os.readlink(path), directory]
            elif path.is_dir():
                options += ["--ro-bind", directory, directory]
        for name in ETC:
            options += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        options += self._masks()
        tmp_size = str(limits.tmp_mb * 1024 * 1024)
        options += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            # /dev is a tmpfs of its own: read-only, with a small /dev/shm, like /tmp.
            "--size",
            tmp_size,
            "--tmpfs",
            "/dev/shm",
            "--remount-ro",
            "/dev",
            "--size",
            tmp_size,
            "--tmpfs",
            "/tmp",
            "--bind",
            str(scratch),
            SCRATCH_INSIDE,
            *(["--ro-bind", str(files), FILES_INSIDE] if files is not None else []),
            "--ro-bind-data",
            str(fds.command),
            COMMAND_INSIDE,
            # The root bwrap builds is a tmpfs too: read-only, so only /scratch, /tmp and
            # /dev/shm (each size-capped but /scratch) take writes.
            "--remount-ro",
            "/",
            "--chdir",
            SCRATCH_INSIDE,
            "--clearenv",
            "--setenv",
            "PATH",
            SEARCH_PATH,
            "--setenv",
            "HOME",
            SCRATCH_INSIDE,
            "--setenv",
            "TMPDIR",
            "/tmp",
            "--setenv",
            "LANG",
            "C.UTF-8",
        ]
        return options

    def command_line(self, *, limits: SandboxLimits, options_fd: int) -> list[str]:
        """What the host's ``ps`` shows: bwrap, where its options are, and the limits."""
        bwrap, prlimit = (self._bwrap, self._prlimit) if self._bwrap else self._tools()
        assert prlimit is not None
        return [
            bwrap,
            "--args",
            str(options_fd),
            "--",
            prlimit,
            f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}",
            f"--as={limits.memory_mb * 1024 * 1024}",
            f"--fsize={limits.file_size_mb * 1024 * 1024}",
            f"--nproc={limits.processes}",
            f"--nofile={_OPEN_FILES}",
            "--core=0",
            "/bin/sh",
            COMMAND_INSIDE,
        ]

    async def run(
        self, command: str, *, scratch: Path, limits: SandboxLimits, files: Path | None = None
    ) -> str:
        """Run ``command`` in fresh namespaces; every process it started ends with it."""
        with _Fds(command) as fds:
            options = self.arguments(scratch=scratch, limits=limits, fds=fds, files=files)
            options_fd = fds.add(_memfd("options", b"".join(f"{o}\0".encode() for o in options)))
            pid1 = _Pid1()
            reader = os.fdopen(fds.take_info_reader(), "rb", buffering=0)
            info, _ = await asyncio.get_running_loop().connect_read_pipe(lambda: pid1, reader)
            try:
                return await run_process(
                    self.command_line(limits=limits, options_fd=options_fd),
                    # bwrap's own environment is visible in the sandbox (/proc/1/environ):
                    # keep chatgate's out of it.
                    env={"PATH": SEARCH_PATH, "LANG": "C.UTF-8"},
                    limits=limits,
                    user=sandbox_uid(),
                    cwd=Path("/"),
                    pass_fds=fds.handed_over(),
                    status_of=shell_status,
                    finished=pid1.kill,
                )
            finally:
                info.close()
                pid1.close()

    def _masks(self) -> list[str]:
        """Cover chatgate's own files where a bound system directory would show them."""
        bound = [Path(d) for d in self._system] + [Path("/etc") / name for name in ETC]
        masks: list[str] = []
        for path in self._hidden:
            if not any(path == b or b in path.parents for b in bound):
                continue
            if path.is_dir():
                masks += ["--tmpfs", str(path)]
            elif path.exists():
                masks += ["--ro-bind", "/dev/null", str(path)]
        return masks


def _fix_for(result: str, state_dir: Path) -> str:
    if "Permission denied" in result and "source path" in result:
        return (
            f"the sandbox's user (uid {sandbox_uid()}) cannot reach {state_dir}: run chatgate "
            "as a non-root user, or set CHATGATE_STATE_DIR to a directory whose parents other "
            "users may enter (e.g. /var/lib/chatgate)"
        )
    if "namespace" in result.lower() or "Operation not permitted" in result:
        return (
            "this host does not let unprivileged users create namespaces (a container "
            "runtime's seccomp or AppArmor profile, or kernel.unprivileged_userns_clone=0): "
            "allow them, or use CHATGATE_SANDBOX=container"
        )
    return _FIX


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(f"chatgate-{name}", os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class _Fds:
    """The file descriptors one run hands to bwrap: the command's text, the seccomp
    filter, the options, and the pipe bwrap reports its PID 1 on. Closed at the end."""

    def __init__(self, command: str) -> None:
        self._all: list[int] = []
        self.command = self.add(_memfd("command", command.encode()))
        filter_program = seccomp.program()
        self.seccomp = (
            None if filter_program is None else self.add(_memfd("seccomp", filter_program))
        )
        self.info_reader, self.info = os.pipe()
        self._all.append(self.info_reader)
        self.add(self.info)

    def add(self, fd: int) -> int:
        self._all.append(fd)
        return fd

    def take_info_reader(self) -> int:
        """The pipe's reading end, now the caller's to close."""
        self._all.remove(self.info_reader)
        return self.info_reader

    def handed_over(self) -> tuple[int, ...]:
        """What bwrap inherits (everything but the pipe's reading end)."""
        return tuple(fd for fd in self._all if fd != self.info_reader)

    def __enter__(self) -> _Fds:
        return self

    def __exit__(self, *_exc: object) -> None:
        for fd in self._all:
            with contextlib.suppress(OSError):
                os.close(fd)


class _Pid1(asyncio.Protocol):
    """bwrap's PID 1 in the sandbox, from what it writes to ``--info-fd``. Killing it ends
    every process in the namespace: done when the run ends, whatever the command did to
    bwrap's die-with-parent signal."""

    def __init__(self) -> None:
        self._data = b""
        self._pidfd: int | None = None

    def data_received(self, data: bytes) -> None:
        """bwrap writes one JSON object, right after it made the namespaces; a pidfd is
        taken on the pid at once, so a pid used again later is never signalled."""
        self._data += data
        if self._pidfd is not None:
            return
        try:
            pid = int(json.loads(self._data)["child-pid"])
            self._pidfd = os.pidfd_open(pid)
        except (ValueError, KeyError, OSError):
            return  # not all of it yet, or it is gone already

    def kill(self) -> None:
        """SIGKILL PID 1 (nothing when it is gone already)."""
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def close(self) -> None:
        """Let go of the pidfd."""
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

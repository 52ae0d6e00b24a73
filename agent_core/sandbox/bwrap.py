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

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from agent_core.sandbox.base import (
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

    def argv(self, command: str, *, scratch: Path, limits: SandboxLimits) -> list[str]:
        """The bwrap command line that runs ``command`` (``scratch`` at /scratch)."""
        bwrap, prlimit = (self._bwrap, self._prlimit) if self._bwrap else self._tools()
        assert prlimit is not None
        args = [
            bwrap,
            "--unshare-all",
            *(["--share-net"] if self.network == "full" else []),
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--hostname",
            "sandbox",
        ]
        for directory in self._system:
            path = Path(directory)
            if path.is_symlink():
                args += ["--symlink", os.readlink(path), directory]
            elif path.is_dir():
                args += ["--ro-bind", directory, directory]
        for name in ETC:
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        args += self._masks()
        args += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--size",
            str(limits.tmp_mb * 1024 * 1024),
            "--tmpfs",
            "/tmp",
            "--bind",
            str(scratch),
            SCRATCH_INSIDE,
            # The root bwrap builds is a tmpfs: read-only, so only /scratch and /tmp (with
            # its size limit) take writes.
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
            "--",
            prlimit,
            f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}",
            f"--as={limits.memory_mb * 1024 * 1024}",
            f"--fsize={limits.file_size_mb * 1024 * 1024}",
            f"--nproc={limits.processes}",
            "--core=0",
            "/bin/sh",
            "-c",
            command,
        ]
        return args

    async def run(self, command: str, *, scratch: Path, limits: SandboxLimits) -> str:
        """Run ``command`` in fresh namespaces; every process it started ends with it."""
        return await run_process(
            self.argv(command, scratch=scratch, limits=limits),
            # bwrap's own environment is visible in the sandbox (/proc/1/environ): keep
            # chatgate's out of it.
            env={"PATH": SEARCH_PATH, "LANG": "C.UTF-8"},
            limits=limits,
            user=sandbox_uid(),
            cwd=Path("/"),
            status_of=shell_status,
        )

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

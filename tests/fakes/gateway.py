"""Run the real ``chatgate`` console script as a subprocess, and talk to it over HTTP."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.fakes.forkserver import ForkedProcess

ROOT = Path(__file__).resolve().parents[2]
CHATGATE = Path(sys.executable).with_name("chatgate")
# The fork server's socket, when the session runs one (tests/conftest.py): processes with
# the default launcher are forked from it instead of started from scratch.
FORK_SERVER: str | None = None

Process = subprocess.Popen[bytes] | ForkedProcess


def spawn(
    launcher: list[str],
    args: list[str],
    *,
    env: dict[str, str],
    cwd: Path,
    log: Path,
    fork: bool = True,
) -> Process:
    """Run ``launcher args`` in a session of its own, output appended to ``log``: forked
    from the fork server when the launcher is the plain console script, one runs, and
    ``fork`` allows it (not for a test of what starting imports)."""
    if fork and FORK_SERVER is not None and launcher == [str(CHATGATE)]:
        return ForkedProcess(FORK_SERVER, args, env=env, cwd=cwd, log=log)
    with log.open("ab") as out:
        return subprocess.Popen(
            [*launcher, *args],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_env(**settings: str) -> dict[str, str]:
    """The environment for a chatgate subprocess: ours, minus CHATGATE_*, plus the guard."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CHATGATE_", "SLACK_", "TELEGRAM_", "DISCORD_"))
    }
    env["PYTHONPATH"] = f"{ROOT / 'tests' / 'netguard'}{os.pathsep}{ROOT}"
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    # litellm's import is seconds of CPU here: a restarted gateway that only resumes a
    # turn from the journal need not pay it (test_cli checks the default warms up).
    env["CHATGATE_MODEL_WARM_UP"] = "false"
    env.update(settings)
    return env


def run_chatgate(
    *args: str, cwd: Path, fork: bool = True, **settings: str
) -> subprocess.CompletedProcess[str]:
    """The real ``chatgate`` command, run to its end, its output captured: forked from the
    fork server when one runs and ``fork`` allows it (a command that imports litellm then
    skips seconds of import), else started from scratch."""
    env = child_env(**settings)
    if not (fork and FORK_SERVER is not None):
        return subprocess.run(
            [str(CHATGATE), *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    with tempfile.TemporaryDirectory(prefix="chatgate-cli-") as scratch:
        out, err = Path(scratch, "out"), Path(scratch, "err")
        process = ForkedProcess(FORK_SERVER, list(args), env=env, cwd=cwd, log=out, errors=err)
        try:
            code = process.wait(timeout=120)
        finally:
            process.kill()
        return subprocess.CompletedProcess(
            [str(CHATGATE), *args],
            code,
            out.read_text(encoding="utf-8", errors="replace") if out.exists() else "",
            err.read_text(encoding="utf-8", errors="replace") if err.exists() else "",
        )


def http(
    method: str,
    url: str,
    body: Any = None,
    *,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10,
) -> tuple[int, Any]:
    """One request; returns (status, parsed JSON body or text)."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None and not any(k.lower() == "content-type" for k in headers or {}):
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, payload = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, payload = exc.code, exc.read()
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, payload.decode(errors="replace")


def upload(gateway: GatewayProcess, name: str, data: bytes) -> tuple[int, Any]:
    """``POST /api/uploads`` one file, as the web chat's page does."""
    boundary = "chatgateboundary7MA4YWxk"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="{name}"\r\nContent-Type: application/octet-stream\r\n\r\n'
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    headers = {
        "Content-Type": f"multipart/form-data; boundary={boundary}",
        "X-Chatgate-Upload": "1",
    }
    return http("POST", f"{gateway.url}/api/uploads", raw=body, headers=headers)


class GatewayProcess:
    """``chatgate gateway`` in its own process group, with its log kept for failures."""

    def __init__(self, *, database_url: str, workdir: Path, **settings: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workdir = workdir
        self.settings = {
            "CHATGATE_DATABASE_URL": database_url,
            "CHATGATE_PORT": str(self.port),
            "CHATGATE_LEASE_SECONDS": "2",
            "CHATGATE_LOG_LEVEL": "debug",
            **settings,
        }
        self.process: Process | None = None
        self.starts = 0
        # What runs the gateway's command (default: the venv's chatgate script), and
        # whether it may be forked from the fork server instead (tests/conftest.py).
        self.launcher: list[str] = [str(CHATGATE)]
        self.fork = True

    @property
    def pid(self) -> int | None:
        """The running process's id."""
        return None if self.process is None else self.process.pid

    def environment(self, **overrides: str) -> dict[str, str]:
        """The environment the gateway runs with."""
        settings = {**self.settings, **overrides}
        return child_env(**{k: v for k, v in settings.items() if v != ""})

    @property
    def log(self) -> str:
        """Everything the gateway printed, across restarts."""
        path = self.workdir / "gateway.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self, *, command: str = "gateway", **overrides: str) -> None:
        """Start and wait until /readyz answers 200."""
        self.launch(command=command, **overrides)
        self.wait_ready()

    def launch(self, *, command: str = "gateway", **overrides: str) -> None:
        """Start it, without waiting for it to be ready."""
        self.starts += 1
        log = self.workdir / "gateway.log"
        with log.open("ab") as out:
            out.write(f"--- start {self.starts} ---\n".encode())
        self.process = spawn(
            self.launcher,
            [command],
            env=self.environment(**overrides),
            cwd=self.workdir,
            log=log,
            fork=self.fork,
        )

    def wait_ready(self, timeout: float = 30) -> None:
        """Poll /readyz; fail with the log if the process dies or never gets ready."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"gateway exited {self.process.returncode}:\n{self.log}")
            try:
                if http("GET", f"{self.url}/readyz", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"gateway not ready after {timeout}s:\n{self.log}")

    def wait_exit(self, timeout: float = 30) -> int:
        """Wait for the process to end by itself; return its exit code."""
        assert self.process is not None
        return self.process.wait(timeout)

    def exit_or_settled(self, conversation_id: str, *, timeout: float = 30) -> int | None:
        """The exit code once the process ended, or None once it runs with no open turn
        in the conversation (see ``wait_settled``)."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                return code
            try:
                url = f"{self.url}/api/conversations/{conversation_id}/messages"
                status, body = http("GET", url, timeout=2)
            except OSError:
                status, body = 0, None
            if status == 200 and body["open_turns"] == 0:
                return None
            time.sleep(0.05)
        raise AssertionError(f"neither exited nor settled in {timeout}s:\n{self.log}")

    def kill(self) -> None:
        """SIGKILL the whole process group: no cleanup, no drain."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM and wait for a graceful exit; return the exit code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def post(self, conversation: str, text: str, *, id: str | None = None) -> dict[str, Any]:
        """Send a web chat message; assert 202; return the body."""
        body: dict[str, Any] = {"conversation": conversation, "text": text}
        if id is not None:
            body["id"] = id
        status, reply = http("POST", f"{self.url}/api/messages", body)
        assert status == 202, (status, reply)
        assert isinstance(reply, dict)
        return reply

    def messages(self, conversation_id: str) -> list[dict[str, Any]]:
        """The conversation's items."""
        status, body = http("GET", f"{self.url}/api/conversations/{conversation_id}/messages")
        assert status == 200, (status, body)
        return list(body["items"])

    def wait_for_replies(
        self, conversation_id: str, count: int, *, timeout: float = 30
    ) -> list[dict[str, Any]]:
        """Wait until the conversation has ``count`` non-user items; return all items."""
        deadline = time.monotonic() + timeout
        items: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            items = self.messages(conversation_id)
            if sum(item["role"] != "user" for item in items) >= count:
                return items
            time.sleep(0.05)
        raise AssertionError(f"{count} replies not seen in {timeout}s: {items}\n{self.log}")

    def wait_settled(self, conversation_id: str, *, timeout: float = 30) -> list[dict[str, Any]]:
        """Wait until no turn of the conversation is left to run or finish (a resumed one
        included: its reply delivered and its receipt stored); return the items then."""
        deadline = time.monotonic() + timeout
        body: Any = None
        while time.monotonic() < deadline:
            status, body = http("GET", f"{self.url}/api/conversations/{conversation_id}/messages")
            assert status == 200, (status, body)
            if body["open_turns"] == 0:
                return list(body["items"])
            time.sleep(0.05)
        raise AssertionError(f"turns still open after {timeout}s: {body}\n{self.log}")

    def stop(self) -> None:
        """Make sure nothing is left running."""
        self.kill()


class RoleProcess:
    """``chatgate worker`` or ``chatgate beat`` in its own process group (no HTTP)."""

    def __init__(self, command: str, *, workdir: Path, settings: dict[str, str]) -> None:
        self.command = command
        self.workdir = workdir
        self.settings = {"CHATGATE_LOG_LEVEL": "debug", **settings}
        self.process: Process | None = None
        self.starts = 0
        # What runs the role's command (default: the venv's chatgate script), and
        # whether it may be forked from the fork server instead.
        self.launcher: list[str] = [str(CHATGATE)]
        self.fork = True

    @property
    def log(self) -> str:
        """Everything it printed, across restarts."""
        path = self.workdir / f"{self.command}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self, *args: str) -> None:
        """Start it (it gets ready in the background)."""
        self.starts += 1
        log = self.workdir / f"{self.command}.log"
        with log.open("ab") as out:
            out.write(f"--- start {self.starts} ---\n".encode())
        self.process = spawn(
            self.launcher,
            [self.command, *args],
            env=child_env(**self.settings),
            cwd=self.workdir,
            log=log,
            fork=self.fork,
        )

    def wait_for_log(self, text: str, *, timeout: float = 30) -> None:
        """Wait until the log (of the current start) contains ``text``."""
        deadline = time.monotonic() + timeout
        marker = f"--- start {self.starts} ---"
        while time.monotonic() < deadline:
            if text in self.log.rpartition(marker)[2]:
                return
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(
                    f"{self.command} exited {self.process.returncode}:\n{self.log}"
                )
            time.sleep(0.1)
        raise AssertionError(
            f"{text!r} not in the {self.command} log after {timeout}s:\n{self.log}"
        )

    def kill(self) -> None:
        """SIGKILL the whole process group (the worker and its pool children)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        """Make sure nothing is left running."""
        self.kill()


def as_user(uid: int, workdir: Path) -> list[str]:
    """A launcher that runs chatgate as ``uid`` (tests run as root). This checkout, the
    venv's packages and the venv's own interpreter may all live where only root can enter
    (a pyenv under /root, say), so they are bind-mounted under ``workdir``, where any user
    may reach them, in a mount namespace of the launcher's own; the interpreter is the
    venv's (same version, same compiled packages). ``workdir`` is handed to ``uid``."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    site = Path(sys.prefix) / "lib" / version / "site-packages"
    base = Path(sys.base_prefix)
    interpreter = Path(os.path.realpath(sys.executable)).relative_to(base)
    mounts = workdir / "mnt"
    sources = {"repo": ROOT, "site": site, "python": base}
    for name in sources:
        (mounts / name).mkdir(parents=True, exist_ok=True)
    for path in (workdir, mounts):
        path.chmod(0o755)
    os.chown(workdir, uid, uid)
    repo = mounts / "repo"
    binds = []
    for name, source in sources.items():
        binds += [str(source), str(mounts / name)]
    script = (
        'while [ "$1" != -- ]; do mount --bind "$1" "$2" || exit 1; shift 2; done; shift; exec "$@"'
    )
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        script,
        "sh",
        *binds,
        "--",
        "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--",
        "env",
        f"PYTHONPATH={repo / 'tests' / 'netguard'}:{repo}:{mounts / 'site'}",
        f"LD_LIBRARY_PATH={mounts / 'python' / 'lib'}",
        f"HOME={workdir}",
        str(mounts / "python" / interpreter),
        "-m",
        "gateway.cli",
    ]


def hardened(pid: int) -> bool:
    """True when a process of a non-root user is not dumpable: the kernel then gives its
    /proc files to root (proc(5))."""
    status = Path(f"/proc/{pid}/status")
    uid = next(line for line in status.read_text().splitlines() if line.startswith("Uid:"))
    assert uid.split()[1] != "0", "only a non-root process shows this"
    return status.stat().st_uid == 0

"""Start ``chatgate`` processes for the tests by forking one that has imported everything.

Starting the console script costs seconds of CPU each time (chatgate, the platform SDKs,
litellm), and the scenario and crash tests start hundreds of them on a 2-core CI machine.
The fork server is a process with no threads that imported all of that once; each request
forks it, and the child becomes ``chatgate <args>`` exactly as the console script would
(``gateway.cli.main`` with that ``argv``, environment and working directory, its own
session, output to the log), so what runs is the same code with the imports already done.

``python -m tests.fakes.forkserver SOCKET`` serves; ``ForkedProcess`` is the client side,
shaped like the ``subprocess.Popen`` the tests use (pid, poll, wait, send_signal, the
negative signal number as the return code of a process a signal ended). Tests that need
the real start (another user, the console script itself) run the command as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any


def _preload() -> None:
    """What a chatgate process imports on its way to ready and to its first model call."""
    import gateway.app
    import gateway.cli  # noqa: F401
    import workers.beat
    import workers.celery_app
    import workers.tasks  # noqa: F401
    from agent_core.model_litellm import preload

    preload()
    for name in (
        "adapters.slack.inbound",
        "adapters.slack.send",
        "adapters.telegram.inbound",
        "adapters.telegram.send",
        "adapters.discord.inbound",
        "adapters.discord.send",
        "slack_bolt.async_app",
        "telegram.ext",
        "discord",
    ):
        with contextlib.suppress(ImportError):
            __import__(name)


def _child(
    request: dict[str, Any], closing: list[socket.socket], selector: selectors.BaseSelector
) -> None:
    """In the forked child: become ``chatgate <argv>``; never returns."""
    code = 1
    try:
        selector.close()
        for sock in closing:
            sock.close()
        os.setsid()
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(request["cwd"])
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        if request.get("errors"):  # stderr apart from stdout
            errors = os.open(request["errors"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.dup2(errors, 2)
            os.close(errors)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["chatgate", *request["argv"]]
        from gateway.cli import main

        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(path: str) -> None:
    """Preload, then fork one child per connection and report its exit on it."""
    _preload()
    # Forking is safe only with no other thread (one holding a lock would leave it held
    # in every child).
    assert threading.active_count() == 1, threading.enumerate()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Listening before the path appears: a client that sees it can connect.
    listener.bind(path + ".new")
    listener.listen(64)
    os.rename(path + ".new", path)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    print("forkserver ready", flush=True)
    while True:
        for key, _events in selector.select(timeout=0.02):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                try:
                    conn.settimeout(10)
                    request = json.loads(_read_line(conn))
                except (OSError, ValueError, ConnectionError) as exc:
                    print(f"forkserver: a bad request: {exc!r}", flush=True)
                    conn.close()
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(request, [listener, conn, *children.values()], selector)
                children[pid] = conn
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is None:
                continue
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps({"exit": code}).encode() + b"\n")
            conn.close()


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("fork server connection closed")
        data += chunk
    return data


class ForkedProcess:
    """A ``chatgate`` process the fork server started, used like ``subprocess.Popen``."""

    def __init__(
        self,
        server: str,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: Path,
        log: Path,
        errors: Path | None = None,
    ) -> None:
        self.args = argv
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._conn.connect(server)
        request = {"argv": argv, "env": env, "cwd": str(cwd), "log": str(log)}
        if errors is not None:
            request["errors"] = str(errors)
        self._conn.sendall(json.dumps(request).encode() + b"\n")
        self._buffer = b""
        self.pid = int(self._message(None)["pid"])
        self.returncode: int | None = None

    def _message(self, timeout: float | None) -> dict[str, Any]:
        self._conn.settimeout(timeout)
        while b"\n" not in self._buffer:
            chunk = self._conn.recv(4096)
            if not chunk:
                raise ConnectionError("the fork server went away")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return dict(json.loads(line))

    def _ended(self, code: int) -> int:
        self.returncode = code
        self._conn.close()
        return code

    def poll(self) -> int | None:
        """The exit code if it ended, else None."""
        if self.returncode is None:
            with contextlib.suppress(TimeoutError, BlockingIOError):
                return self._ended(int(self._message(0.0)["exit"]))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit code (``subprocess.TimeoutExpired`` after ``timeout``)."""
        if self.returncode is None:
            try:
                return self._ended(int(self._message(timeout)["exit"]))
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
        return self.returncode

    def __del__(self) -> None:
        # A process nobody waited for (the test ended with it running): its exit is of
        # no interest any more.
        with contextlib.suppress(Exception):
            self._conn.close()

    def send_signal(self, sig: int) -> None:
        """Signal the process (not its group)."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)


def start_server(path: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start the fork server and wait until it serves."""
    with log.open("ab") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.forkserver", str(path)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 120
    while not path.exists():
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the fork server did not start:\n{log.read_text()}")
        time.sleep(0.05)
    return server


if __name__ == "__main__":
    serve(sys.argv[1])

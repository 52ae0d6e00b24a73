"""A PostgreSQL cluster and a Redis server of a test's own, on spare ports, to stop, kill and
start again without disturbing the shared ones (127.0.0.1:5432 and :6379).

PostgreSQL comes from ``initdb``/``pg_ctl`` (``/usr/lib/postgresql/*/bin``), run as the
``postgres`` user because initdb refuses root; its files live in a directory of their own
under /tmp that user may enter. Redis keeps an append-only file synced on every write, as a
production broker would, so a restart keeps the queue.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.fakes.gateway import free_port


def _postgres_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    path = shutil.which(name)
    assert path, f"{name} not found (install PostgreSQL's server package)"
    return path


class ThrowawayPostgres:
    """``start()``, ``stop()`` (fast shutdown), ``kill()`` (immediate: a crash), ``url``."""

    def __init__(self) -> None:
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="chatgate-pg-"))
        self.data = self.root / "data"
        self._user = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        self.restarts = 0
        self._initialized = False

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the ``chatgate`` database."""
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/chatgate"

    def _run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", "postgres", "--"] if self._user is not None else []
        return subprocess.run(
            [*prefix, *command], check=check, capture_output=True, text=True, timeout=120
        )

    def start(self) -> None:
        """Start it (creating the cluster and the database the first time)."""
        if not self._initialized:
            if self._user is not None:
                os.chown(self.root, self._user.pw_uid, self._user.pw_gid)
            self.root.chmod(0o755)
            self._run(
                _postgres_bin("initdb"), "-D", str(self.data), "-U", "postgres",
                "--auth=trust", "-E", "UTF8", "--no-sync",
            )  # fmt: skip
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c max_connections=300 -c shared_buffers=32MB"
        )
        self._run(
            _postgres_bin("pg_ctl"), "-D", str(self.data), "-o", options,
            "-l", str(self.root / "postgres.log"), "-w", "-t", "60", "start",
        )  # fmt: skip
        if not self._initialized:
            self._run(
                _postgres_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port),
                "-U", "postgres", "chatgate",
            )  # fmt: skip
            self._initialized = True

    def _stop(self, mode: str) -> None:
        self._run(
            _postgres_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60",
            "stop", check=False,
        )  # fmt: skip

    def stop(self) -> None:
        """A fast shutdown (clients are disconnected, nothing is lost)."""
        self._stop("fast")

    def kill(self) -> None:
        """An immediate shutdown: what a crash does (the next start recovers from WAL)."""
        self._stop("immediate")

    def restart(self, *, crash: bool = True, down_for: float = 1.0) -> None:
        """Down (crashed, or shut down), ``down_for`` seconds, up again."""
        self.kill() if crash else self.stop()
        time.sleep(down_for)
        self.start()
        self.restarts += 1

    def close(self) -> None:
        """Stop it and remove its files."""
        self._stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


class ThrowawayRedis:
    """``redis-server`` on a spare port with an fsync-always append-only file."""

    def __init__(self) -> None:
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="chatgate-redis-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        """The broker URL."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start it and wait until it answers PING."""
        server = shutil.which("redis-server")
        assert server, "redis-server not found"
        with (self.root / "redis.log").open("ab") as log:
            self.process = subprocess.Popen(
                [
                    server, "--port", str(self.port), "--bind", "127.0.0.1",
                    "--dir", str(self.root), "--appendonly", "yes",
                    "--appendfsync", "always", "--save", "", "--protected-mode", "no",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        import redis

        while time.monotonic() < deadline:
            try:
                if redis.Redis(port=self.port, socket_timeout=1).ping():
                    return
            except redis.RedisError:
                time.sleep(0.05)
        raise AssertionError(f"redis on {self.port} did not start")

    def stop(self, *, kill: bool = False) -> None:
        """SIGTERM (it saves and exits) or SIGKILL; wait for it."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            self.process.wait(30)

    def restart(self, *, down_for: float = 1.0, kill: bool = True) -> None:
        """Down ``down_for`` seconds, then up again."""
        self.stop(kill=kill)
        time.sleep(down_for)
        self.start()
        self.restarts += 1

    def close(self) -> None:
        """Stop it and remove its files."""
        self.stop(kill=True)
        shutil.rmtree(self.root, ignore_errors=True)

"""Every chatgate process hardened, the database private, fault points from the
environment only: checked from outside, on the real commands."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.gateway import CHATGATE, GatewayProcess, RoleProcess, as_user, child_env, hardened
from tests.scenario.test_cli import _chatgate as chatgate

NON_ROOT = 10001


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A directory outside pytest's private tmp, so another user can be given it."""
    path = Path(tempfile.mkdtemp(prefix="chatgate-hardening-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent == pid:
            found.append(int(entry.name))
    return found


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.any_database
def test_migrate_worker_and_beat_are_not_dumpable(workdir: Path, redis_url: str) -> None:
    """Run as uid 10001, each role's process (and the worker's pool children) belongs to
    root in /proc: not dumpable, so no process of the same user reads its environment or
    memory. migrate is caught while it waits for the database's write lock."""
    if os.getuid() != 0:
        pytest.skip("the check runs the roles as another user")
    database = workdir / "chatgate.db"
    settings = {
        "CHATGATE_DATABASE_URL": f"sqlite+aiosqlite:///{database}",
        "CHATGATE_REDIS_URL": redis_url,
        "CHATGATE_STATE_DIR": str(workdir / "state"),
    }
    launcher = as_user(NON_ROOT, workdir)
    migrate = RoleProcess("migrate", workdir=workdir, settings=settings)
    migrate.launcher = launcher
    migrate.start()
    assert migrate.process is not None
    assert migrate.process.wait(60) == 0, migrate.log
    assert _mode(database) == 0o600

    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        held = RoleProcess("migrate", workdir=workdir, settings=settings)
        held.launcher = launcher
        held.start()
        assert held.process is not None
        time.sleep(3)  # it started and now waits for the lock
        assert held.process.poll() is None, held.log
        assert hardened(held.process.pid)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert held.process.wait(60) == 0, held.log

    roles = []
    try:
        for command in ("worker", "beat"):
            role = RoleProcess(command, workdir=workdir, settings=settings)
            role.launcher = launcher
            roles.append(role)
            role.start(*(["--concurrency", "2"] if command == "worker" else []))
        worker, beat = roles
        worker.wait_for_log(" ready.", timeout=60)
        beat.wait_for_log("beat ready", timeout=60)
        assert worker.process is not None
        assert beat.process is not None
        pool = _children(worker.process.pid)
        assert len(pool) >= 2, worker.log
        for pid in (worker.process.pid, beat.process.pid, *pool):
            assert hardened(pid), pid
    finally:
        for role in roles:
            role.stop()


def test_database_files_are_private_after_migrate_and_run(tmp_path: Path) -> None:
    """With a permissive umask, migrate creates the database 0600; files an older version
    left 0644 are 0600 again once chatgate run has opened them."""
    database = tmp_path / "state" / "chatgate.db"
    url = f"sqlite+aiosqlite:///{database}"
    result = subprocess.run(
        [str(CHATGATE), "migrate"],
        cwd=tmp_path,
        env=child_env(CHATGATE_DATABASE_URL=url),
        capture_output=True,
        text=True,
        timeout=120,
        umask=0o022,
    )
    assert result.returncode == 0, result.stderr
    assert _mode(database) == 0o600
    assert _mode(database.parent) == 0o700
    for suffix in ("", "-wal", "-shm"):
        path = database.with_name(f"chatgate.db{suffix}")
        path.touch()
        path.chmod(0o644)
    gateway = GatewayProcess(database_url=url, workdir=tmp_path)
    try:
        gateway.start(command="run")
        for suffix in ("", "-wal", "-shm"):
            assert _mode(database.with_name(f"chatgate.db{suffix}")) == 0o600, suffix
    finally:
        gateway.stop()


def test_fault_points_come_from_the_environment_only(tmp_path: Path) -> None:
    """In chatgate.toml a fault point is refused (exit 2); from the environment it is
    logged loudly at start and shown by doctor."""
    (tmp_path / "chatgate.toml").write_text('test_fault = ["after_send"]\n')
    refused = chatgate("gateway", cwd=tmp_path)
    assert refused.returncode == 2
    assert "invalid setting test_fault" in refused.stderr
    assert "environment only" in refused.stderr
    (tmp_path / "chatgate.toml").unlink()

    url = f"sqlite+aiosqlite:///{tmp_path / 'chatgate.db'}"
    gateway = GatewayProcess(database_url=url, workdir=tmp_path, CHATGATE_TEST_FAULT="after_send")
    try:
        gateway.start()
        assert "TEST FAULT POINTS ARE SET" in gateway.log
    finally:
        gateway.stop()
    doctor = chatgate(
        "doctor", cwd=tmp_path, CHATGATE_DATABASE_URL=url, CHATGATE_TEST_FAULT="after_send"
    )
    assert "WARN faults" in doctor.stdout
    assert "after_send" in doctor.stdout


def test_doctor_warns_about_a_config_or_database_others_can_read(tmp_path: Path) -> None:
    """chatgate.toml and the database readable by others: doctor says so and how to fix."""
    config = tmp_path / "chatgate.toml"
    config.write_text('system_prompt = "hi"\n')
    config.chmod(0o644)
    url = f"sqlite+aiosqlite:///{tmp_path / 'chatgate.db'}"
    doctor = chatgate("doctor", cwd=tmp_path, CHATGATE_DATABASE_URL=url)
    assert "WARN files" in doctor.stdout
    assert "chmod 600 chatgate.toml" in doctor.stdout
    config.chmod(0o600)
    again = chatgate("doctor", cwd=tmp_path, CHATGATE_DATABASE_URL=url)
    assert "ok   files" in again.stdout

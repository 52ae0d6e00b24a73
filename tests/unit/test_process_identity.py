"""Lease owner names: a process on this machine proves a holder gone; nothing else does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent_core.process_identity import process_owner, provably_gone, take_over_leases
from agent_core.storage.database import Database
from agent_core.storage.store import Store


def _owner_of_a_child() -> tuple[subprocess.Popen[bytes], str]:
    """A live child process and its owner name (it runs until killed)."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from agent_core.process_identity import process_owner as o; "
            "print(o(), flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None
    return child, child.stdout.readline().decode().strip()


def _kill(child: subprocess.Popen[bytes]) -> None:
    child.kill()
    child.communicate()


def test_a_live_holder_is_not_gone_and_a_dead_one_is() -> None:
    """The child's name is not gone while it runs (nor is ours), and is once it was
    killed and reaped."""
    child, owner = _owner_of_a_child()
    try:
        assert not provably_gone(owner)
        assert not provably_gone(process_owner())
    finally:
        _kill(child)
    assert provably_gone(owner)


def test_only_this_place_can_prove_anything() -> None:
    """Another machine or PID namespace, a pid reused by a process started later, an old
    name without a start time: only the reused pid is provably gone."""
    host, pid, start, place, token = process_owner().rsplit(":", 4)
    assert not provably_gone(f"{host}:999999:{start}:0123456789ab:{token}")
    assert provably_gone(f"{host}:{pid}:{int(start) - 1}:{place}:{token}")
    assert not provably_gone(f"{host}:{pid}:{token}")
    assert not provably_gone(f"{host}:999999:-:{place}:{token}")


async def test_the_leases_of_a_dead_holder_end_at_start(database: Database) -> None:
    """A killed process's conversation lease and lock end when the next process starts;
    a live process's stay."""
    store = Store(database)
    child, dead = _owner_of_a_child()
    _kill(child)
    alive = process_owner()
    assert await store.take_lock("poller", owner=dead, ttl=300)
    assert await store.take_lock("beat", owner=alive, ttl=300)
    assert sorted(await store.lease_holders()) == sorted([dead, alive])
    assert await take_over_leases(store) == 1
    assert await store.lease_holders() == [alive]
    assert await store.take_lock("poller", owner=alive, ttl=300)
    assert not await store.take_lock("beat", owner=dead, ttl=300)


def test_a_process_proc_hides_is_not_taken_for_dead(monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc refusing to show a live pid (hidepid, ProtectProc) proves nothing: the
    holder counts as alive."""
    child, owner = _owner_of_a_child()
    real = Path.read_text

    def hidden(path: Path, *args: object, **kwargs: object) -> str:
        if path.name == "stat" and path.parent.name == str(child.pid):
            raise PermissionError(13, "Permission denied")
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    try:
        monkeypatch.setattr(Path, "read_text", hidden)
        assert not provably_gone(owner)
    finally:
        monkeypatch.undo()
        _kill(child)
    assert provably_gone(owner)


def test_another_hosts_holder_is_never_gone_from_here() -> None:
    """The same boot and namespace hash under another host name (a cloned VM) is not
    this place."""
    _host, _pid, start, place, token = process_owner().rsplit(":", 4)
    assert not provably_gone(f"elsewhere:999999:{start}:{place}:{token}")

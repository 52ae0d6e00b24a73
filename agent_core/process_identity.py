"""Lease owner names that let a restarted process prove the previous holder is gone.

An owner name is ``host:pid:start:place:token``: ``start`` is when the process started
(``/proc/<pid>/stat``, clock ticks since boot) and ``place`` names the machine's boot and
the PID namespace the pid belongs to. A process in the same place can look the pid up: no
such process, or one that started at another time (the pid was reused), means the holder
is dead, and its leases need not be waited out. From anywhere else (another host, another
container, or a system without ``/proc``) nothing is provable, and the lease's expiry
stays the bound.
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
import uuid
from pathlib import Path

import structlog

from agent_core.stores import LockStore

log = structlog.get_logger("chatgate.leases")

PROC = Path("/proc")


class _Unknown(Exception):
    """Whether the process lives cannot be told from here."""


def _start_ticks(pid: int) -> str | None:
    """When ``pid`` started, in clock ticks since boot; None when there is provably no
    such live process (no such pid, or a zombie not yet reaped). Raises ``_Unknown`` when
    it cannot be told (``/proc`` hides it: ``hidepid``, ``ProtectProc``)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # it exists, as another user
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except FileNotFoundError:
        return None  # it ended between the two looks
    except OSError as exc:
        raise _Unknown(pid) from exc
    # The command name, in parentheses, may hold spaces: count fields after its end.
    fields = stat.rpartition(")")[2].split()
    if len(fields) <= 19:
        raise _Unknown(pid)
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]


@functools.cache
def _place() -> str | None:
    """This boot of this machine and this PID namespace, as 12 hex digits; None when they
    cannot be read."""
    try:
        boot = (PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
        namespace = os.readlink(PROC / "self" / "ns" / "pid")
        # A /proc of another PID namespace (unshare --pid without --mount-proc) would
        # answer about other processes than our pids name.
        if os.readlink(PROC / "self") != str(os.getpid()):
            return None
    except OSError:
        return None
    return hashlib.sha256(f"{boot} {namespace}".encode()).hexdigest()[:12]


def _host() -> str:
    return socket.gethostname()[:48].replace(":", "-")


def process_owner() -> str:
    """A lease owner name unique to this process (and this start of it)."""
    pid = os.getpid()
    try:
        start = _start_ticks(pid) or "-"
    except _Unknown:
        start = "-"
    return f"{_host()}:{pid}:{start}:{_place() or '-'}:{uuid.uuid4().hex[:8]}"


def provably_gone(owner: str) -> bool:
    """True only when ``owner`` names a process on this host, in this boot and PID
    namespace, that no longer runs. False for a live process, for one whose life cannot
    be seen from here, for anything elsewhere, and for names in an older format."""
    parts = owner.rsplit(":", 4)
    if len(parts) != 5:
        return False
    host, pid, start, place, _token = parts
    here = _place()
    if here is None or place != here or host != _host() or not pid.isdigit() or start == "-":
        return False
    try:
        # Our own pid compares equal too: this process is not gone.
        return _start_ticks(int(pid)) != start
    except _Unknown:
        return False


async def take_over_leases(store: LockStore) -> int:
    """At start: end the leases of holders that are provably gone (a process on this
    machine, in this PID namespace, killed or crashed before giving them up), so their
    conversations, jobs and locks go on now instead of after the expiry. How many."""
    dead = [owner for owner in await store.lease_holders() if provably_gone(owner)]
    if not dead:
        return 0
    count = await store.expire_leases(dead)
    log.info("took over the leases of processes that are gone", holders=dead, leases=count)
    return count

"""Every chatgate process keeps what it holds to itself.

Files it creates are private (umask 077), and it is not dumpable: no core file with its
tokens in memory, and a process of the same user (a command run without a sandbox, or
anything else running as chatgate's user) can neither ptrace it nor read its
``/proc/PID/environ`` or ``/proc/PID/mem``. The flag survives ``fork`` (Celery's pool
children) but not ``exec``: every chatgate command sets it again at start.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

_PR_SET_DUMPABLE = 4
_PR_GET_DUMPABLE = 3


def harden_process() -> None:
    """umask 077 and not dumpable."""
    os.umask(0o077)
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


def is_dumpable() -> bool:
    """This process's dumpable flag (False once :func:`harden_process` ran)."""
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0))


def private_file(path: os.PathLike[str] | str) -> None:
    """Make a file ours alone (0600), creating it empty when it does not exist; a file
    owned by someone else is left as it is."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    try:
        info = os.fstat(fd)
        if info.st_uid == os.geteuid() and info.st_mode & 0o077:
            os.fchmod(fd, info.st_mode & 0o700)
    finally:
        os.close(fd)

"""A seccomp filter for sandboxed commands: the few system calls that reach across
processes or into the kernel's shared state fail with EPERM.

Inside its namespaces a command runs as the same user as bwrap's PID 1 (its own user
namespace), so without this it could ``ptrace`` that process, turn off its die-with-parent
signal and outlive its time limit; read or write other processes' memory; or use the
kernel keyring, which is shared by every sandbox running as the same host user. Also
refused: ``perf_event_open``, ``bpf``, ``userfaultfd`` and ``io_uring``, kernel surface no
shell command needs. System calls of another ABI (32-bit ``int 0x80``, x32) are refused
whole, so the list cannot be side-stepped by number.

The program is classic BPF as bwrap's ``--seccomp FD`` takes it (what libseccomp's
``seccomp_export_bpf`` writes), built here for x86_64 and aarch64.
"""

from __future__ import annotations

import errno
import platform
import struct

# linux/audit.h
_ARCHES = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# Syscall numbers (asm/unistd.h) of what is refused.
_DENIED = {
    "x86_64": {
        "ptrace": 101,
        "add_key": 248,
        "request_key": 249,
        "keyctl": 250,
        "perf_event_open": 298,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "bpf": 321,
        "userfaultfd": 323,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "pidfd_getfd": 438,
    },
    "aarch64": {
        "add_key": 217,
        "request_key": 218,
        "keyctl": 219,
        "ptrace": 117,
        "perf_event_open": 241,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "bpf": 280,
        "userfaultfd": 282,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "pidfd_getfd": 438,
    },
}
_X32_BIT = 0x40000000

# linux/filter.h, linux/seccomp.h
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_ALLOW = 0x7FFF0000
_DENY = 0x00050000 | errno.EPERM
_NR, _ARCH = 0, 4  # offsets in struct seccomp_data


def denied_calls(machine: str | None = None) -> tuple[str, ...]:
    """The names of the refused system calls on this machine (empty: no filter here)."""
    return tuple(sorted(_DENIED.get(machine or platform.machine(), {})))


def program(machine: str | None = None) -> bytes | None:
    """The filter for this machine's architecture, or None where there is none."""
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        return None
    numbers = sorted(_DENIED[machine].values())
    code: list[tuple[int, int, int, int]] = []
    deny_at = 4 + len(numbers) + 1  # index of the final "deny" instruction
    if machine == "x86_64":
        deny_at += 1

    def jump_to_deny() -> int:
        return deny_at - (len(code) + 1)

    code.append((_LD_W_ABS, 0, 0, _ARCH))
    code.append((_JEQ_K, 1, 0, _ARCHES[machine]))  # our ABI: go on; any other: deny
    code.append((_RET_K, 0, 0, _DENY))
    code.append((_LD_W_ABS, 0, 0, _NR))
    if machine == "x86_64":
        code.append((_JGE_K, jump_to_deny(), 0, _X32_BIT))
    for number in numbers:
        code.append((_JEQ_K, jump_to_deny(), 0, number))
    code.append((_RET_K, 0, 0, _ALLOW))
    code.append((_RET_K, 0, 0, _DENY))
    assert len(code) - 1 == deny_at
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in code)

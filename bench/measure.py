"""What the benchmarks read off a process: CPU seconds used and peak resident memory."""

from __future__ import annotations

from pathlib import Path


def cpu_and_peak(pid: int) -> tuple[float, int]:
    """(user + system CPU seconds so far, peak RSS in bytes) of a Linux process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    peak = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) * 1024
    return ticks / 100, peak


def cpu_of_command(name: str) -> float:
    """User + system CPU seconds so far of every live process whose command is ``name``
    (say, all of a PostgreSQL server's processes). A process that ended in between is not
    counted; the ladder's database connections live as long as the gateway does."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        command, _, rest = text.partition(" (")[2].rpartition(")")
        if command == name:
            fields = rest.split()
            total += int(fields[11]) + int(fields[12])
    return total / 100


def rss(pid: int) -> int:
    """Resident memory now, in bytes, of a Linux process."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0

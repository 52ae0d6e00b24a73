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


def rss(pid: int) -> int:
    """Resident memory now, in bytes, of a Linux process."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0

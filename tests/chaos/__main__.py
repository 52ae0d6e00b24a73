"""``make chaos``: the long chaos run; prints one JSON line and a table, exits 1 when a
promised zero is not (or memory grows past the bound).

``CHATGATE_CHAOS_SECONDS`` (default 600), ``CHATGATE_CHAOS_CONVERSATIONS`` (per platform,
default 4) and ``CHATGATE_CHAOS_SEED`` change it. The pace (a message every 1.3-3.2 s in
each conversation, about 7 a second in all) is one two cores keep up with for the whole
run while everything (the fakes, PostgreSQL, Redis and six chatgate processes restarting
all the time) shares them: faster, the backlog grows until the end and the run measures
the machine, not chatgate.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from pathlib import Path

from tests.chaos.harness import Chaos, Plan, failures, table

# Past this, the gateway that is never killed is taken to leak.
MAX_GROWTH_MIB_PER_1000_TURNS = 8.0


def main() -> int:
    # SIGTERM (Ctrl-C, a CI timeout) stops it cleanly: every process, PostgreSQL and Redis.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    seconds = float(os.environ.get("CHATGATE_CHAOS_SECONDS", "600"))
    plan = Plan(
        seconds=seconds,
        kill_every=(1.0, 3.0),
        postgres_restarts=max(3, int(seconds // 150)),
        redis_restarts=max(3, int(seconds // 150)),
        conversations=int(os.environ.get("CHATGATE_CHAOS_CONVERSATIONS", "4")),
        pause=(1.3, 3.2),
        seed=int(os.environ.get("CHATGATE_CHAOS_SEED", "1")),
    )
    with tempfile.TemporaryDirectory(prefix="chatgate-chaos-") as workdir:
        figures = Chaos(plan, Path(workdir)).run()
    print(json.dumps(figures, sort_keys=True))
    print(table(figures))
    failed = failures(figures)
    growth = figures.get("rss_growth_mib_per_1000_turns")
    if growth is not None and growth > MAX_GROWTH_MIB_PER_1000_TURNS:
        failed.append(f"memory grows {growth} MiB per 1,000 turns")
    if figures["kills"] < 200 and seconds >= 600:
        failed.append(f"only {figures['kills']} kills")
    for line in failed:
        print(f"FAIL {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

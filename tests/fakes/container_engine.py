#!/usr/bin/env python3
"""A fake ``docker``/``podman`` command line for the container backend's tests.

No engine runs on the test machines, so this stands in for one: ``image inspect`` knows
one image, ``run`` runs the command with ``sh -c`` on the host in the mounted scratch
directory (no isolation at all: it checks chatgate's side of the conversation with the
engine, not a boundary), and ``rm --force NAME`` kills what ``run`` started. Every call's
arguments are appended, as JSON, to ``calls.jsonl`` beside this script's copy.
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
IMAGE = "chatgate-test-image:1"


def main(argv: list[str]) -> int:
    with (HERE / "calls.jsonl").open("a") as log:
        log.write(json.dumps(argv) + "\n")
    if argv[:2] == ["image", "inspect"]:
        if argv[-1] != IMAGE:
            print(f"Error: No such image: {argv[-1]}", file=sys.stderr)
            return 1
        print("sha256:0123")
        return 0
    if argv[:1] == ["rm"]:
        pidfile = HERE / f"{argv[-1]}.pid"
        if pidfile.exists():
            os.killpg(int(pidfile.read_text()), signal.SIGKILL)
        return 0
    if argv[:1] == ["run"]:
        name = argv[argv.index("--name") + 1]
        volume = argv[argv.index("--volume") + 1]
        source = volume.split(":")[0]
        command = argv[-1]
        process = subprocess.Popen(["/bin/sh", "-c", command], cwd=source, start_new_session=True)
        (HERE / f"{name}.pid").write_text(str(process.pid))
        return process.wait()
    print(f"fake engine: unknown command {argv}", file=sys.stderr)
    return 125


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

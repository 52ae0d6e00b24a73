"""run_command attacked through the real gateway: what a prompt injection holding the tool
calls could try, each command approved in the web chat, as root and as a non-root uid.

The fake model answers a user message ``run: COMMAND`` with a ``run_command`` call; the
first call of a conversation is approved through the web API ("Allow in this
conversation"), later ones run at once. Each result is read where the model reads it: the
tool message of the next model request.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.gateway import GatewayProcess, as_user, hardened, http
from tests.fakes.model_server import FakeModelServer, Scripted
from tests.scenario.test_cli import _chatgate as chatgate

pytestmark = pytest.mark.any_database

CANARY = f"canary-{uuid.uuid4().hex[:12]}"
NON_ROOT = 10001


def _answer(body: dict[str, Any]) -> Scripted | None:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Scripted(text="noted")
    text = str(last.get("content", ""))
    if text.startswith("run: "):
        call = {
            "id": f"call_{uuid.uuid4().hex[:8]}",
            "type": "function",
            "function": {
                "name": "run_command",
                "arguments": json.dumps({"command": text.removeprefix("run: ")}),
            },
        }
        return Scripted(tool_calls=[call])
    return None


class Attacker:
    """Sends commands to one conversation and reads what came back."""

    def __init__(self, gateway: GatewayProcess, model: FakeModelServer, conversation: str):
        self.gateway = gateway
        self.model = model
        self.conversation = conversation
        self.conversation_id: str | None = None
        self.allowed = False

    def run(self, command: str, *, timeout: float = 60) -> str:
        """Run one command the way the model would; its result as the model read it."""
        seen = len(self.model.requests)
        accepted = self.gateway.post(self.conversation, f"run: {command}")
        self.conversation_id = accepted["conversation_id"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.allowed:
                self._allow()
            for request in self.model.requests[seen:]:
                last = request["messages"][-1]
                if last["role"] == "tool":
                    return str(last["content"])
            time.sleep(0.05)
        raise AssertionError(f"no result for {command!r}:\n{self.gateway.log[-4000:]}")

    def _allow(self) -> None:
        assert self.conversation_id is not None
        for item in self.gateway.messages(self.conversation_id):
            approval = item.get("approval")
            if approval and approval["status"] == "pending":
                status, body = http(
                    "POST",
                    f"{self.gateway.url}/api/approvals/{approval['id']}",
                    {"decision": "allow_conversation"},
                )
                assert status == 200, body
                self.allowed = True


def _live(marker: str) -> list[str]:
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z":
            found.append(cmdline)
    return found


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A gateway directory anyone may enter (0755), outside pytest's private tmp."""
    path = Path(tempfile.mkdtemp(prefix="chatgate-attack-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _gateway(workdir: Path, model: FakeModelServer, *, uid: int | None) -> GatewayProcess:
    config = workdir / "chatgate.toml"
    config.write_text(f'system_prompt = "config-{CANARY}"\n\n[secrets]\nGITHUB = "GITHUB_TOKEN"\n')
    settings = {
        **model.settings(),
        "CHATGATE_CONFIG": str(config),
        "GITHUB_TOKEN": f"secret-{CANARY}",
        "CHATGATE_MODEL_API_KEY": f"key-{CANARY}",
    }
    database = f"sqlite+aiosqlite:///{workdir / 'chatgate.db'}"
    gateway = GatewayProcess(database_url=database, workdir=workdir, **settings)
    if uid is not None:
        gateway.launcher = as_user(uid, workdir)
        os.chown(config, uid, uid)
    return gateway


def _attack(gateway: GatewayProcess, model: FakeModelServer, workdir: Path) -> None:
    """Everything the done-when list names, against one running gateway."""
    database, config = workdir / "chatgate.db", workdir / "chatgate.toml"
    # Even when an operator left them readable by anyone.
    for path in (database, config):
        path.chmod(0o644)
    alice = Attacker(gateway, model, "alice")

    files = alice.run(
        f"cat {database} {config}; ls -la {workdir}; ls /; cat /proc/1/cmdline; echo end"
    )
    assert "No such file or directory" in files
    assert CANARY not in files
    assert "SQLite format" not in files
    assert files.rstrip().endswith("end")

    port = gateway.port
    connect = (
        "import socket\n"
        "for host in ('127.0.0.1', 'localhost'):\n"
        "    try:\n"
        f"        socket.create_connection((host, {port}), timeout=2); print('REACHED', host)\n"
        "    except OSError as exc:\n"
        "        print('refused', host, exc)\n"
    )
    network = alice.run(f'python3 -c "{connect}"')
    assert "REACHED" not in network
    assert "refused 127.0.0.1" in network

    environ = alice.run(
        "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | "
        "grep -E '^(CHATGATE_|SLACK_|TELEGRAM_|DISCORD_|GITHUB)'; env; echo end"
    )
    assert CANARY not in environ
    assert "CHATGATE_" not in environ
    assert "GITHUB" not in environ

    marker = str(40000 + uuid.uuid4().int % 9000)
    left = alice.run(
        f"setsid sleep {marker} & nohup sleep {marker} >/dev/null 2>&1 & "
        f"(sleep {marker} &); echo started"
    )
    assert left.startswith("exit code 0")
    deadline = time.monotonic() + 5
    while _live(f"sleep {marker}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _live(f"sleep {marker}") == []

    assert alice.run("echo kept > note && cat note") == "exit code 0\nkept\n"
    assert alice.run("cat note; pwd") == "exit code 0\nkept\n/scratch\n"
    bob = Attacker(gateway, model, "bob")
    other = bob.run("ls -a /scratch; cat /scratch/note 2>/dev/null; echo end")
    assert other == "exit code 0\n.\n..\nend\n"

    bomb = alice.run("bomb() { bomb | bomb & }; bomb; sleep 2; echo survived", timeout=90)
    assert "fork" in bomb.lower()
    assert http("GET", f"{gateway.url}/readyz")[0] == 200
    memory = alice.run("python3 -c 'b = bytearray(2 * 1024**3); print(len(b))'")
    assert "MemoryError" in memory
    assert str(2 * 1024**3) not in memory
    # The gateway kept answering throughout.
    reply = gateway.post("carol", "still there?")
    assert gateway.wait_for_replies(reply["conversation_id"], 1)[-1]["text"] == (
        "echo: still there?"
    )


@pytest.mark.parametrize("as_root", [True, False], ids=["root", "uid-10001"])
def test_run_command_is_contained(
    model_server: FakeModelServer, workdir: Path, as_root: bool
) -> None:
    """As root, commands run as nobody; as uid 10001 (like the image and the systemd unit)
    they run as that same uid, so only the namespaces keep the gateway's files, memory and
    API from them. Every wall holds either way."""
    if as_root and os.getuid() != 0:
        pytest.skip("the suite does not run as root here")
    model_server.respond = _answer
    uid = NON_ROOT if not as_root and os.getuid() == 0 else None
    gateway = _gateway(workdir, model_server, uid=uid)
    try:
        gateway.start()
        assert gateway.pid is not None
        if uid is not None:
            assert hardened(gateway.pid)
        assert "sandbox ready" in gateway.log
        _attack(gateway, model_server, workdir)
    finally:
        gateway.stop()


def test_without_a_working_sandbox_run_command_is_not_offered(
    model_server: FakeModelServer, workdir: Path
) -> None:
    """bwrap pointed at a missing binary and no container engine: the model is not offered
    run_command, the start-up log and doctor say how to get a boundary."""
    (workdir / "chatgate.toml").write_text(
        '[tools.run_command]\nbwrap = "/nonexistent/bwrap"\n'
        'container_engine = "/nonexistent/podman"\n'
    )
    settings = {**model_server.settings(), "CHATGATE_CONFIG": str(workdir / "chatgate.toml")}
    database = f"sqlite+aiosqlite:///{workdir / 'chatgate.db'}"
    gateway = GatewayProcess(database_url=database, workdir=workdir, **settings)
    try:
        gateway.start()
        reply = gateway.post("ops", "hello")
        gateway.wait_for_replies(reply["conversation_id"], 1)
        offered = [t["function"]["name"] for t in model_server.requests[-1].get("tools", [])]
        assert "list_schedules" in offered
        assert "run_command" not in offered
        assert "run_command is not offered: no working sandbox" in gateway.log
        assert "apt-get install bubblewrap" in gateway.log
    finally:
        gateway.stop()
    doctor = chatgate("doctor", cwd=workdir, **{**gateway.settings, "CHATGATE_MODEL": ""})
    assert "WARN sandbox" in doctor.stdout
    assert "run_command is not offered" in doctor.stdout
    assert "fix: install bubblewrap" in doctor.stdout


def test_sandbox_none_runs_and_warns(model_server: FakeModelServer, workdir: Path) -> None:
    """CHATGATE_SANDBOX=none: run_command is offered, runs, and every start warns."""
    model_server.respond = _answer
    database = f"sqlite+aiosqlite:///{workdir / 'chatgate.db'}"
    gateway = GatewayProcess(
        database_url=database, workdir=workdir, CHATGATE_SANDBOX="none", **model_server.settings()
    )
    try:
        gateway.start()
        assert "run_command runs WITHOUT a sandbox" in gateway.log
        result = Attacker(gateway, model_server, "ops").run("echo plain")
        assert result == "exit code 0\nplain\n"
    finally:
        gateway.stop()

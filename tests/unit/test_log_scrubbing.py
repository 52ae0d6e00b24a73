"""Every credential chatgate holds is scrubbed from every log line: structlog events,
exception text, and what libraries log through the standard logging module. Checked in a
process of its own, the way chatgate's commands configure logging."""

from __future__ import annotations

import subprocess
import sys

from tests.fakes.gateway import ROOT

TOKEN = "xoxb-1234567890-canary-slack"
SECRET = "ghp_canary_0123456789"
SCRIPT = f"""
import base64, logging, structlog
from agent_core.settings_loader import load_settings
from gateway.app import configure_logging

settings = load_settings({{
    "SLACK_BOT_TOKEN": "{TOKEN}",
    "SLACK_SIGNING_SECRET": "signing-secret-canary-42",
    "CHATGATE_SECRETS": '{{"GITHUB": "GITHUB_TOKEN"}}',
    "CHATGATE_LOG_LEVEL": "debug",
}})
configure_logging(settings)
log = structlog.get_logger("test")
try:
    raise ValueError("Port could not be cast to integer value as '{SECRET}'")
except ValueError:
    log.exception("tool crashed", url="https://x:{SECRET}/", auth="Bearer {TOKEN}")
log.info("basic auth", header=base64.b64encode(b"me:{SECRET}").decode())
logging.getLogger("slack_sdk").warning("POST https://slack.com/api/x token=%s", "{TOKEN}")
try:
    raise RuntimeError("boom {SECRET}")
except RuntimeError:
    logging.getLogger("aiohttp").exception("handler failed")
"""


def test_log_lines_and_tracebacks_hold_no_credential() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env={"GITHUB_TOKEN": SECRET, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    out = result.stderr
    assert "tool crashed" in out
    assert "Port could not be cast" in out
    assert "handler failed" in out
    assert "RuntimeError: boom [secret:GITHUB]" in out
    for value in (SECRET, TOKEN, SECRET[:12], "signing-secret-canary"):
        assert value not in out
    assert "[secret:GITHUB]" in out
    assert "[secret:SLACK_BOT_TOKEN]" in out

"""The operator's upkeep in every gateway: the settings each start ran with (in the audit log,
with what changed since the last start), and retention (old message text and journal
content, old audit entries)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
from datetime import timedelta
from typing import Any

import structlog
from pydantic import BaseModel, JsonValue, SecretStr

from agent_core.events import utcnow
from agent_core.settings import Settings
from gateway.runtime import Runtime

log = structlog.get_logger("chatgate.upkeep")

_URL_SUFFIXES = ("_url", "_api_base", "_endpoint")
_NAMES_ONLY = frozenset({"secrets", "mcp"})
_SHOWN = 200


def settings_view(settings: Settings) -> dict[str, JsonValue]:
    """Each setting as the audit log may show it: secrets as ``set`` (never a value, nor a
    digest of anything that holds one), URLs without their credentials or query, other
    long or nested values as a digest (to see that they changed)."""
    shown: dict[str, JsonValue] = {}
    for name in type(settings).model_fields:
        value: Any = getattr(settings, name)
        if isinstance(value, SecretStr):
            shown[name] = "set"
        elif name in _NAMES_ONLY:
            # Their values may hold credentials (an MCP server's env and headers).
            shown[name] = _names(value)
        elif name.endswith(_URL_SUFFIXES) and isinstance(value, str):
            shown[name] = without_credentials(value)
        elif name == "profile":
            # Each profile's server may carry credentials, as CHATGATE_MODEL_API_BASE may.
            shown[name] = [
                {
                    "name": p.name,
                    "model": p.model,
                    "api_base": without_credentials(p.api_base) if p.api_base else None,
                }
                for p in value
            ]
        elif value is None or isinstance(value, bool | int | float):
            shown[name] = value
        else:
            dumped = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
            text = json.dumps(dumped, default=str, sort_keys=True)
            if len(text) <= _SHOWN and not isinstance(value, BaseModel):
                shown[name] = json.loads(text)
            else:
                shown[name] = "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]
    return shown


def _names(value: Any) -> JsonValue:
    dumped = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    if isinstance(dumped, dict):
        return {k: _names(v) if isinstance(v, dict) else "set" for k, v in sorted(dumped.items())}
    return "set" if dumped else None


# A URL's credentials end at its last "@": a password may hold "/", "?", "#" or even "@"
# unescaped (SQLAlchemy, yarl and redis-py read some of these so), which ``urlsplit`` would
# take for the path. A path with an "@" in it is hidden too: more, never less.
_URL = re.compile(r"^(?P<scheme>[A-Za-z][\w+.-]*)://(?:(?P<userinfo>.*)@)?(?P<rest>[^@]*)$", re.S)


def without_credentials(url: str) -> str:
    """``url`` with any user name and password as ``***`` and no query or fragment."""
    match = _URL.match(url)
    if match is None:
        return "set"
    rest = re.split(r"[?#]", match["rest"], maxsplit=1)[0]
    userinfo = "***@" if match["userinfo"] is not None else ""
    return f"{match['scheme']}://{userinfo}{rest}"


async def record_start(runtime: Runtime) -> None:
    """Write the settings this process started with, and which changed since the last
    start any process recorded."""
    current = settings_view(runtime.settings)
    previous = await runtime.operations.audit(action="config.start", limit=1)
    before = previous[0].detail if previous else None
    was = before.get("settings") if isinstance(before, dict) else None
    changed = sorted(
        name
        for name, value in current.items()
        if not isinstance(was, dict) or was.get(name) != value
    )
    await runtime.operations.record(
        actor="chatgate",
        action="config.start",
        subject=runtime.owner,
        detail={"changed": changed if was is not None else [], "settings": current},
    )


async def retain(runtime: Runtime, *, every: float = 3600.0) -> None:
    """Every ``every`` seconds (the first pass at start): remove message text and journal
    content past ``CHATGATE_RETENTION_DAYS`` and audit entries past
    ``CHATGATE_AUDIT_RETENTION_DAYS``. Safe on every gateway at once: each change is
    idempotent and each pass takes only what aged past the limit since the last."""
    settings = runtime.settings
    while not runtime.stopping.is_set():
        try:
            if settings.retention_days is not None:
                done = await runtime.operations.expire_old(days=settings.retention_days)
                if done.get("messages") or done.get("journal_steps"):
                    log.info("old content removed", **done)
            cutoff = utcnow() - timedelta(days=settings.audit_retention_days)
            await runtime.operations.prune_audit(before=cutoff)
        except Exception:
            log.exception("retention failed")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(every):
                await runtime.stopping.wait()

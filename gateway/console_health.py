"""The console's usage and cost, audit log (and its JSON Lines export) and health."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiohttp import web

from gateway.console_query import Bad, handler, query_int, query_limit, query_text, runtime_of
from gateway.routes import PLATFORM_HEARING

_BREAKDOWNS = ("user", "conversation", "platform", "model", "day")


@handler
async def usage(request: web.Request) -> web.Response:
    """``by`` one of user, conversation, platform, model, day; ``days`` back (default
    30); with the budgets and today's spend against them, and the 👍/👎 of the period."""
    runtime = runtime_of(request)
    by = request.query.get("by", "day")
    if by not in _BREAKDOWNS:
        raise Bad(f"'by' must be one of {', '.join(_BREAKDOWNS)}")
    days = query_int(request, "days", default=30)
    assert days is not None
    start = datetime.now(UTC) - timedelta(days=max(0, min(days, 3660)))
    since = start.strftime("%Y-%m-%d")
    rows = await runtime.operations.usage(by=by, since=since)
    today = await runtime.operations.spend_today()
    settings = runtime.settings
    budgets = {
        "turn_tokens": settings.budget_turn_tokens,
        "conversation_tokens": settings.budget_conversation_tokens,
        "conversation_usd": settings.budget_conversation_usd,
        "user_daily_tokens": settings.budget_user_daily_tokens,
        "user_daily_usd": settings.budget_user_daily_usd,
        "daily_usd": settings.budget_daily_usd,
    }
    return web.json_response(
        {
            "by": by,
            "since": since,
            "items": rows,
            "budgets": budgets,
            "today": today,
            "totals": await runtime.operations.totals(),
            # Ratings of the agent's replies given (or changed) in the period.
            "feedback": await runtime.operations.feedback_totals(
                since=start.replace(hour=0, minute=0, second=0, microsecond=0)
            ),
        }
    )


@handler
async def audit_log(request: web.Request) -> web.Response:
    """The audit log, newest first; ``q`` searches it, ``actor`` and ``action`` filter."""
    entries = await runtime_of(request).operations.audit(
        query=query_text(request, "q"),
        actor=query_text(request, "actor"),
        action=query_text(request, "action"),
        before=query_int(request, "before"),
        limit=query_limit(request, default=100, most=500),
    )
    items = [entry.to_json() for entry in entries]
    full = len(entries) == query_limit(request, default=100, most=500)
    following = entries[-1].id if entries and full else None
    return web.json_response({"items": items, "next": following})


@handler
async def audit_export(request: web.Request) -> web.StreamResponse:
    """The whole audit log (or what ``q`` matches) as JSON Lines, oldest first."""
    runtime = runtime_of(request)
    query = query_text(request, "q")
    response = web.StreamResponse(
        headers={
            "Content-Type": "application/x-ndjson",
            "Content-Disposition": 'attachment; filename="chatgate-audit.jsonl"',
        }
    )
    await response.prepare(request)
    after = 0
    while True:
        entries = await runtime.operations.audit_chunk(query=query, after=after)
        if not entries:
            break
        lines = "".join(json.dumps(e.to_json(), ensure_ascii=False) + "\n" for e in entries)
        await response.write(lines.encode())
        after = entries[-1].id
    await response.write_eof()
    return response


async def health(request: web.Request) -> web.Response:
    """Platforms, the job queue, failures and recoveries, and each process's memory."""
    runtime = runtime_of(request)
    depth, oldest = await runtime.store.job_depth()
    hearings = request.app.get(PLATFORM_HEARING, {})
    return web.json_response(
        {
            "platforms": {name: h.snapshot() for name, h in hearings.items()},
            "jobs": {"by_status": depth, "oldest_due_seconds": round(oldest, 1)},
            "turns_in_flight": runtime.supervisor.active,
            "journal": await runtime.operations.health(),
            "processes": _processes(),
            "owner": runtime.owner,
        }
    )


def _rss(pid: int) -> tuple[str, int] | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    name, rss = "?", 0
    for line in status.splitlines():
        if line.startswith("Name:"):
            name = line.split(None, 1)[1].strip()
        elif line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    return name, rss


def _processes() -> list[dict[str, Any]]:
    """This gateway and the processes it started (``chatgate run``'s worker and beat), with
    their resident memory (Linux ``/proc``; elsewhere, this process only)."""
    me = os.getpid()
    found = []
    mine = _rss(me)
    if mine is None:
        import resource

        return [{"pid": me, "name": "chatgate", "rss_bytes": resource.getrusage(0).ru_maxrss}]
    found.append({"pid": me, "name": mine[0], "rss_bytes": mine[1], "role": "gateway"})
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == me:
            child = _rss(int(entry.name))
            if child is not None:
                found.append(
                    {
                        "pid": int(entry.name),
                        "name": child[0],
                        "rss_bytes": child[1],
                        "role": "child",
                    }
                )
    return found

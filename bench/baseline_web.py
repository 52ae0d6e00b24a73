"""Baseline for the turn benchmark: a hand-written aiohttp + litellm handler, no durability.

POST /api/messages {"conversation", "text"} calls the model once (history kept in memory)
and answers with the reply. Nothing is stored; a crash loses everything in flight.
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm
from aiohttp import web

HISTORY: defaultdict[str, list[dict[str, str]]] = defaultdict(list)


async def handle(request: web.Request) -> web.Response:
    body = await request.json()
    history = HISTORY[body["conversation"]]
    history.append({"role": "user", "content": body["text"]})
    response = await litellm.acompletion(
        model=os.environ["BENCH_MODEL"],
        api_base=os.environ["BENCH_API_BASE"],
        api_key="sk-bench",
        messages=[{"role": "system", "content": "be brief"}, *history],
    )
    text = response.choices[0].message.content
    history.append({"role": "assistant", "content": text})
    return web.json_response({"text": text})


async def ready(request: web.Request) -> web.Response:
    return web.json_response({"ready": True})


app = web.Application()
app.router.add_post("/api/messages", handle)
app.router.add_get("/readyz", ready)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)

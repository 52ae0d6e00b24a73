"""Baseline for the Slack benchmark: the hand-written slack-bolt + litellm handler a
developer would start from. No durability: no ledger, no journal, no dedupe; a crash
loses everything in flight, and Slack's retries run the handler again.

The bolt app (signature check, url_verification, auto-ack) on aiohttp; on ``app_mention``
it calls the model once with the thread's history (kept in memory) and posts the answer in
the thread.
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

HISTORY: defaultdict[str, list[dict[str, str]]] = defaultdict(list)

bolt = AsyncApp(
    client=AsyncWebClient(
        token=os.environ["BENCH_SLACK_TOKEN"], base_url=os.environ["BENCH_SLACK_API"]
    ),
    signing_secret=os.environ["BENCH_SLACK_SECRET"],
)


@bolt.event("app_mention")
async def mention(event: dict[str, str], say) -> None:  # type: ignore[no-untyped-def]
    thread = event.get("thread_ts") or event["ts"]
    history = HISTORY[f"{event['channel']}:{thread}"]
    history.append({"role": "user", "content": event["text"]})
    response = await litellm.acompletion(
        model=os.environ["BENCH_MODEL"],
        api_base=os.environ["BENCH_API_BASE"],
        api_key="sk-bench",
        messages=[{"role": "system", "content": "be brief"}, *history],
    )
    text = response.choices[0].message.content
    history.append({"role": "assistant", "content": text})
    await say(text=text, thread_ts=thread)


async def events(request: web.Request) -> web.StreamResponse:
    return await to_aiohttp_response(await bolt.async_dispatch(await to_bolt_request(request)))


async def ready(request: web.Request) -> web.Response:
    return web.json_response({"ready": True})


app = web.Application()
app.router.add_post("/slack/events", events)
app.router.add_get("/readyz", ready)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)

"""The web chat's 👍/👎 under the agent's replies: ``POST /api/feedback``, behind the same
door as the rest of its API (``api.access_middleware``)."""

from __future__ import annotations

from aiohttp import web

from adapters.base import BadRequest
from adapters.http import json_error
from adapters.web.parse import parse_rating
from gateway.routes import read_json
from gateway.runtime import RUNTIME


async def rate(request: web.Request) -> web.Response:
    """``{"message_id": ID, "rating": "up" | "down" | null, "user"?: USER}``: 200 with the
    rating now held; 404 when the message is not an agent's reply in a web conversation
    (others are rated on their own platform). A 👎 asks in the conversation what went
    wrong, once."""
    runtime = request.app[RUNTIME]
    body = await read_json(request)
    try:
        message_id, rating, user = parse_rating(body)
    except BadRequest as exc:
        return json_error(400, str(exc))
    target = await runtime.store.message_to_rate(message_id)
    if target is None or target.conversation.platform != "web":
        return json_error(404, "no such reply to rate")
    change = await runtime.feedback.rate(target, user=user, rating=rating)
    return web.json_response(
        {"message_id": message_id, "turn_id": target.turn_id, "rating": change.rating}
    )


def add_routes(app: web.Application) -> None:
    """Register the route."""
    app.router.add_post("/api/feedback", rate)

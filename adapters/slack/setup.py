"""What ``chatgate doctor`` asks Slack: the token (``auth.test``), its scopes and the mode."""

from __future__ import annotations

import asyncio

from adapters.base import Check
from agent_core.settings import Settings

# What deploy/slack/manifest.yml asks for; without them some messages never arrive.
SLACK_SCOPES = (
    "app_mentions:read",
    "chat:write",
    "commands",
    "im:history",
    "channels:history",
    "groups:history",
    "files:read",
    "files:write",
    "reactions:write",
    "reactions:read",
    "assistant:write",
    "im:write",
)


async def check(settings: Settings) -> Check:
    """A FAIL names the setting to fix; a WARN lists the scopes the app lacks."""
    assert settings.slack_bot_token is not None
    if settings.slack_signing_secret is None and settings.slack_app_token is None:
        return Check(
            "slack",
            "FAIL",
            "SLACK_BOT_TOKEN is set but neither SLACK_SIGNING_SECRET (Events API) nor "
            "SLACK_APP_TOKEN (Socket Mode)",
            "copy the signing secret from the app's Basic Information page",
        )
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    client = AsyncWebClient(
        token=settings.slack_bot_token.get_secret_value(), base_url=settings.slack_api_url
    )
    try:
        async with asyncio.timeout(10):
            response = await client.auth_test()
    except SlackApiError as exc:
        return Check(
            "slack",
            "FAIL",
            f"auth.test: {exc.response.get('error', exc)}",
            "check SLACK_BOT_TOKEN (the xoxb- Bot User OAuth Token) and reinstall the app",
        )
    except (OSError, TimeoutError) as exc:
        return Check(
            "slack",
            "FAIL",
            f"{settings.slack_api_url}: {exc or 'timed out'}",
            "check SLACK_API_URL and the network",
        )
    granted = {s.strip() for s in str(response.headers.get("x-oauth-scopes", "")).split(",")}
    missing = [scope for scope in SLACK_SCOPES if scope not in granted]
    who = f"as {response.get('user_id')} in {response.get('team') or response.get('team_id')}"
    if missing and granted != {""}:
        return Check(
            "slack",
            "WARN",
            f"auth.test ok {who}; missing scopes: {', '.join(missing)}",
            "add them (deploy/slack/manifest.yml lists them all) and reinstall the app",
        )
    mode = "Socket Mode" if settings.slack_app_token else "Events API at /slack/events"
    return Check("slack", "ok", f"auth.test ok {who}; {mode}")


async def sync_commands(settings: Settings) -> str:
    """``chatgate commands sync`` for Slack: what the operator does, in one line.

    A Slack app's slash commands live in its manifest, and no Web API call a bot token may
    make changes them (``apps.manifest.update`` takes an app configuration token, which
    expires every 12 hours, and the app's id; chatgate holds neither). So nothing is sent:
    the line says to paste the manifest generated from the registry."""
    where = (
        "chatgate slack manifest"
        if settings.slack_app_token is not None
        else "chatgate slack manifest --url https://YOUR-GATEWAY/slack/events"
    )
    return (
        f"slack: slash commands come from the app's manifest: run `{where}` and paste its "
        "output at https://api.slack.com/apps -> your app -> App Manifest, then reinstall "
        "the app (deploy/slack/manifest.yml is the same with a placeholder URL)"
    )


async def command_drift(settings: Settings) -> list[str]:
    """What ``chatgate doctor`` can say about Slack's slash commands differing from the
    registry: nothing, honestly. A bot token cannot read the app's slash commands (only
    ``apps.manifest.export`` can, with an app configuration token chatgate does not hold),
    and the repository's manifest is not what the installed app has. The drift that can be
    seen shows at run time instead: a slash command the registry does not know is logged
    (``slack slash command not in the registry``) and answered with the help."""
    return []

"""The gateway process: the aiohttp app and its wiring, inbound routing, supervisor, web
chat, CLI."""

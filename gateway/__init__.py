"""The gateway process: the aiohttp app and its wiring, dispatcher, supervisor, web chat, CLI."""

"""Telegram's command menu, drawn from the command registry: ``setMyCommands`` for each
scope (private chats, group chats, group administrators). Pure: what the menus hold."""

from __future__ import annotations

from agent_core.command_registry import Scope, offered

# Telegram's scope types, by the registry's scope.
SCOPES: dict[Scope, str] = {
    "private": "all_private_chats",
    "groups": "all_group_chats",
    "admins": "all_chat_administrators",
}
DESCRIPTION_LIMIT = 256  # Telegram's limit for a command's description


def menus() -> dict[str, list[tuple[str, str]]]:
    """Each Telegram scope type's menu: (command, description), in the registry's order."""
    return {
        telegram_scope: [(command.name, _described(command.description, command.synopsis()))
                         for command in offered(scope)]
        for scope, telegram_scope in SCOPES.items()
    }  # fmt: skip


def _described(description: str, synopsis: str) -> str:
    """The description, with the arguments when the command takes any (the menu shows
    only the name)."""
    name, _, arguments = synopsis.partition(" ")
    text = f"{description} ({name} {arguments})" if arguments else description
    return text[:DESCRIPTION_LIMIT]

"""``remember``, ``recall`` and ``forget``: what the agent keeps between conversations.

A fact is the person's (``scope = "me"``: recalled in any of their conversations, by them
only) or the conversation's (recalled there, by anyone in it). Naming what a fact is about
(``about``) lets a newer fact replace an older one: "favourite editor: vim" supersedes
"favourite editor: emacs" for the same person.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Annotated, Literal

from pydantic import Field

from agent_core.records import MemoryScope
from agent_core.stores import MemoryStore
from agent_core.tools.base import Tool, ToolContext, ToolFailed, TurnContext


def memory_tools_factory(
    store: MemoryStore, *, admins: Collection[str] = ()
) -> Callable[[TurnContext], list[Tool]]:
    """The factory of the three memory tools (built once). A person's facts are theirs
    alone, wherever they were made; a conversation's facts are shared there, and forgotten
    by whoever made them or an admin."""
    admin_set = frozenset(admins)

    async def remember(
        context: ToolContext,
        fact: Annotated[str, Field(min_length=1, max_length=2000)],
        about: Annotated[str, Field(max_length=200)] | None = None,
        scope: Literal["me", "conversation"] = "me",
    ) -> str:
        """Remember a durable fact for later conversations: a preference, a decision, a
        name, a deadline. `about` names what it is about in a few words ("favourite
        editor"); a newer fact about the same thing replaces the older one. `scope` "me"
        keeps it for the person you talk to (in any conversation); "conversation" keeps it
        for this conversation only."""
        stored: MemoryScope = "user" if scope == "me" else "conversation"
        memory_id, replaced = await store.remember(
            user=context.turn.user,
            conversation_id=context.turn.conversation_id,
            scope=stored,
            fact=fact.strip(),
            about=about.strip().lower() if about else None,
            source=f"remember in turn {context.turn.turn_id}",
            turn_id=context.turn.turn_id,
        )
        note = (
            f" (replacing {replaced} older fact{'s' if replaced != 1 else ''})" if replaced else ""
        )
        return f"Remembered as m{memory_id}{note}."

    async def recall(
        context: ToolContext, query: Annotated[str, Field(min_length=1, max_length=500)]
    ) -> str:
        """Search what was remembered for this person or this conversation (full-text,
        newest and most relevant first). Use a few keywords."""
        found = await store.recall(
            user=context.turn.user, conversation_id=context.turn.conversation_id, query=query
        )
        if not found:
            return "Nothing remembered matches that."
        return "\n".join(
            f"m{m.id} ({m.created_at:%Y-%m-%d}, {'yours' if m.scope == 'user' else 'here'}"
            f"{', about ' + m.about if m.about else ''}): {m.fact}"
            for m in found
        )

    async def forget(
        context: ToolContext, id: Annotated[str, Field(pattern=r"^m?[0-9]{1,18}$")]
    ) -> str:
        """Forget one remembered fact by its id (as recall shows it, e.g. "m12"), when the
        person asks you to."""
        if not await store.forget(
            user=context.turn.user,
            conversation_id=context.turn.conversation_id,
            memory_id=int(id.removeprefix("m")),
            admin=context.turn.user in admin_set,
        ):
            raise ToolFailed(f"there is no remembered fact {id} here")
        return f"Forgot {id}."

    tools = [
        Tool(remember, idempotent=False),
        Tool(recall, idempotent=True),
        Tool(forget, idempotent=True),
    ]

    def factory(turn: TurnContext) -> list[Tool]:
        return tools

    return factory

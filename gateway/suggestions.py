"""What a command's argument may be, suggested as a person types it (Discord's
autocomplete; ``GatewayHooks.suggest``): this conversation's schedules and pending
approvals, the configured profiles and models. Only for a person who may talk to the agent
there: the suggestions name what the conversation holds."""

from __future__ import annotations

from typing import Any

from agent_core.access import Membership
from agent_core.command_registry import Suggest
from agent_core.events import ConversationKey
from agent_core.profiles import Profiles
from gateway.runtime import Runtime
from workers.bootstrap import access_policy, build_profiles

# Pending approvals read to find this conversation's (they are few: each holds a turn).
_APPROVALS_READ = 500


class Suggestions:
    """Built once per gateway; the access policy and profiles come from its settings."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._membership = Membership(access_policy(runtime.settings), runtime.store.is_paired)
        self._profiles: Profiles = build_profiles(runtime.settings)

    async def __call__(
        self, kind: Suggest, where: ConversationKey, user: str, typed: str
    ) -> list[tuple[str, str]]:
        """``(value, label)`` pairs whose value or label holds ``typed``, best first."""
        if not await self._membership.may_talk(user, where):
            return []
        found = await self._all(kind, where)
        wanted = typed.strip().lower()
        return [(v, label) for v, label in found if wanted in v.lower() or wanted in label.lower()]

    async def _all(self, kind: Suggest, where: ConversationKey) -> list[tuple[str, str]]:
        runtime = self._runtime
        if kind == "profiles":
            return [
                ("default", "default: what this place gives"),
                *((n, n) for n in self._profiles.names),
            ]
        if kind == "models":
            return [
                ("default", "default: the profile's"),
                *((m, m) for m in self._profiles.models()),
            ]
        conversation_id = await runtime.store.conversation_id_for(where)
        if conversation_id is None:
            return []
        if kind == "schedules":
            found = await runtime.schedules.listing(conversation_id, runs=0)
            return [(s.id, runtime.schedules.describe(s)) for s in found if s.status != "deleted"]
        page: Any = await runtime.operations.approvals(
            pending=True, before=None, limit=_APPROVALS_READ
        )
        return [
            (str(item["id"]), f"{item['id']}: {item['tool']} for {item['requested_by']}")
            for item in page["items"]
            if item.get("conversation_id") == conversation_id
        ]

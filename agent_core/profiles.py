"""Which ``[[profile]]`` applies to a conversation, and what the agent is there: its model,
system prompt, tools, policies, budgets, busy mode and whether it answers every message.
Pure: the settings in, an :class:`Applied` out.

A conversation pinned by an admin (``/profile NAME``) has that profile; otherwise the
most specific profile whose place holds (channel, then workspace or guild, then platform,
then ``default = true``; in a tie the first in the file). A thread has its channel's. An
admin may also pin a model (``/model NAME``, one of the configured models), which wins
over the profile's. Whatever a profile leaves unset is the settings'.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypeVar

from agent_core.budgets import BudgetLimits
from agent_core.events import ConversationKey
from agent_core.permissions import PolicyRule
from agent_core.records import BusyMode
from agent_core.section_settings import ProfileSetting

T = TypeVar("T", int, float)

DEFAULT_NAME = "default"
"""The name ``/profile`` shows when no profile applies (the settings' own)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Applied:
    """What the agent is in one conversation."""

    # The profile's name; None: no profile applies (the settings' own).
    name: str | None
    model: str | None
    api_base: str | None
    fallbacks: tuple[str, ...]
    system_prompt: str
    # Names or shell patterns of the tools offered; None: every tool.
    tools: tuple[str, ...] | None
    policy: tuple[PolicyRule, ...]
    budgets: BudgetLimits
    busy_mode: BusyMode
    reply: Literal["all", "mentions"]
    # Chosen by an admin (``/profile``, ``/model``) rather than by the place.
    pinned: bool = False

    def offers(self, tool: str) -> bool:
        """Whether the profile offers this tool."""
        return offers(self.tools, tool)

    @property
    def shown_name(self) -> str:
        """The name ``/profile`` and the journal show."""
        return self.name or DEFAULT_NAME


def offers(tools: Sequence[str] | None, tool: str) -> bool:
    """Whether ``tools`` (names or shell patterns; None: every tool) offers ``tool``."""
    return tools is None or any(fnmatch.fnmatchcase(tool, pattern) for pattern in tools)


class Profiles:
    """The configured profiles, and the settings they fall back on."""

    def __init__(
        self,
        profiles: Sequence[ProfileSetting],
        *,
        model: str | None,
        api_base: str | None,
        fallbacks: Sequence[str],
        system_prompt: str,
        budgets: BudgetLimits,
        busy_mode: BusyMode,
        policy: Sequence[PolicyRule] = (),
    ) -> None:
        self._profiles = tuple(profiles)
        self._by_name = {p.name: p for p in self._profiles}
        self._base = Applied(
            name=None,
            model=model,
            api_base=api_base,
            fallbacks=tuple(fallbacks),
            system_prompt=system_prompt,
            tools=None,
            policy=tuple(policy),
            budgets=budgets,
            busy_mode=busy_mode,
            reply="mentions",
        )

    @property
    def any_answers_all(self) -> bool:
        """Whether some profile answers every message (``reply = "all"``)."""
        return any(p.reply == "all" for p in self._profiles)

    @property
    def names(self) -> list[str]:
        """Every profile's name, in the file's order."""
        return [p.name for p in self._profiles]

    def named(self, name: str) -> ProfileSetting | None:
        """The profile called ``name``."""
        return self._by_name.get(name)

    def models(self) -> list[str]:
        """The models the configuration names (the settings' and the profiles', with their
        fallbacks), each once: the ones ``/model`` may pin."""
        names = [self._base.model, *self._base.fallbacks]
        for profile in self._profiles:
            names += [profile.model, *(profile.fallback_models or ())]
        return list(dict.fromkeys(n for n in names if n))

    def placed(self, key: ConversationKey) -> ProfileSetting | None:
        """The profile its place gives a conversation (None: none does)."""
        best: ProfileSetting | None = None
        for profile in self._profiles:
            if profile.place < 0 or not _holds(profile, key):
                continue
            if best is None or profile.place > best.place:
                best = profile
        return best

    def applied(
        self,
        key: ConversationKey,
        *,
        pinned_profile: str | None = None,
        pinned_model: str | None = None,
    ) -> Applied:
        """What the agent is in the conversation at ``key``; a pin naming a profile or a
        model no longer configured is ignored."""
        chosen = self._by_name.get(pinned_profile) if pinned_profile else None
        profile = chosen or self.placed(key)
        applied = self._base if profile is None else self._with(profile, pinned=chosen is not None)
        if pinned_model and pinned_model in self.models() and pinned_model != applied.model:
            same = pinned_model == self._base.model
            applied = replace(
                applied,
                model=pinned_model,
                api_base=self._base.api_base if same else self._api_base_of(pinned_model),
                fallbacks=(),
                pinned=True,
            )
        return applied

    def _api_base_of(self, model: str) -> str | None:
        """The server of a profile that names ``model`` (None: the provider's own)."""
        for profile in self._profiles:
            if profile.model == model:
                return profile.api_base
        return None

    def _with(self, profile: ProfileSetting, *, pinned: bool) -> Applied:
        base = self._base
        limits = base.budgets
        budgets = replace(
            limits,
            turn_tokens=_either(profile.budget_turn_tokens, limits.turn_tokens),
            conversation_tokens=_either(
                profile.budget_conversation_tokens, limits.conversation_tokens
            ),
            conversation_usd=_either(profile.budget_conversation_usd, limits.conversation_usd),
            user_daily_tokens=_either(profile.budget_user_daily_tokens, limits.user_daily_tokens),
            user_daily_usd=_either(profile.budget_user_daily_usd, limits.user_daily_usd),
        )
        own_model = profile.model is not None
        return Applied(
            name=profile.name,
            model=profile.model or base.model,
            api_base=profile.api_base if own_model else base.api_base,
            fallbacks=tuple(
                profile.fallback_models
                if profile.fallback_models is not None
                else (() if own_model else base.fallbacks)
            ),
            system_prompt=profile.system_prompt or base.system_prompt,
            tools=tuple(profile.tools) if profile.tools is not None else None,
            policy=(*profile.policy, *base.policy),
            budgets=budgets,
            busy_mode=profile.busy_mode or base.busy_mode,
            reply=profile.reply or base.reply,
            pinned=pinned,
        )


def _holds(profile: ProfileSetting, key: ConversationKey) -> bool:
    return (
        (profile.platform is None or profile.platform == key.platform)
        and (profile.workspace is None or profile.workspace == key.workspace)
        and (profile.channel is None or profile.channel == key.channel)
    )


def _either(value: T | None, fallback: T | None) -> T | None:
    return value if value is not None else fallback

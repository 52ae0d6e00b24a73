"""What the agent is for one turn: its conversation's profile (``agent_core.profiles``) made
concrete (the model, the prompt builder, the budgets, the tools offered, the policy), built
once per profile and model and reused, or the settings' own where no profile applies."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from agent_core.budgets import BudgetLimits
from agent_core.history import Prompter
from agent_core.model import Model
from agent_core.permissions import Permissions
from agent_core.profiles import Applied, Profiles, offers
from agent_core.records import TurnRecord
from agent_core.stores import Journal

ModelFor = Callable[[Applied], "Model | None"]
"""The model a profile names (its server and fallbacks); the bootstrap builds each once."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Setup:
    """What the agent is for a turn: its profile's name (None: the settings' own), the
    model and prompt builder, the budgets, the tools offered and the policy."""

    profile: str | None
    model: Model | None
    prompter: Prompter | None
    budgets: BudgetLimits
    # Names or shell patterns of the tools offered (None: all).
    tools: tuple[str, ...] | None = None
    # The profile's rules before the settings' (None: the tool round's own).
    permissions: Permissions | None = None

    def offers(self, tool: str) -> bool:
        """Whether the turn is offered this tool."""
        return offers(self.tools, tool)


class TurnSetups:
    """Each turn's :class:`Setup`, from its conversation's profile and pins."""

    def __init__(
        self,
        store: Journal,
        *,
        model: Model | None,
        summarizer: Model | None,
        system_prompt: str,
        reply_max_tokens: int,
        budgets: BudgetLimits,
        profiles: Profiles | None = None,
        models: ModelFor | None = None,
    ) -> None:
        self._store = store
        self._model = model
        self._summarizer = summarizer
        self._system_prompt = system_prompt
        self._reply_max_tokens = reply_max_tokens
        self._profiles = profiles
        self._models = models
        prompter = self._prompter(model, system_prompt) if model is not None else None
        self.default = Setup(profile=None, model=model, prompter=prompter, budgets=budgets)
        self._built: dict[tuple[object, ...], Setup] = {}

    def _prompter(self, model: Model, system_prompt: str) -> Prompter:
        return Prompter(
            self._store,
            model=model,
            summarizer=self._summarizer or model,
            system_prompt=system_prompt,
            reply_max_tokens=self._reply_max_tokens,
        )

    def for_turn(self, turn: TurnRecord) -> tuple[Setup, TurnRecord]:
        """The turn's setup, and the turn with the profile's busy mode where its
        conversation set none."""
        if self._profiles is None:
            return self.default, turn
        applied = self._profiles.applied(
            turn.conversation,
            pinned_profile=turn.pinned_profile,
            pinned_model=turn.pinned_model,
        )
        if turn.busy_mode is None:
            turn = dataclasses.replace(turn, busy_mode=applied.busy_mode)
        key = (applied.name, applied.model, applied.api_base, applied.fallbacks)
        found = self._built.get(key)
        if found is None:
            found = self._built[key] = self._build(applied)
        return found, turn

    def _build(self, applied: Applied) -> Setup:
        model = self._models(applied) if self._models is not None else self._model
        prompter = self.default.prompter
        if model is not None and (
            model is not self._model or applied.system_prompt != self._system_prompt
        ):
            prompter = self._prompter(model, applied.system_prompt)
        return Setup(
            profile=applied.name,
            model=model,
            prompter=prompter,
            budgets=applied.budgets,
            tools=applied.tools,
            # A profile's rules go before the settings' (the tool round has those alone).
            permissions=Permissions(list(applied.policy)) if applied.name else None,
        )

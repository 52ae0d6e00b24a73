"""Which profile applies where, and what it makes of the settings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agent_core.budgets import BudgetLimits
from agent_core.events import ConversationKey
from agent_core.permissions import PolicyRule
from agent_core.profiles import Profiles
from agent_core.section_settings import ProfileSetting


def _profiles(*profiles: ProfileSetting) -> Profiles:
    return Profiles(
        profiles,
        model="openai/base",
        api_base="http://base/v1",
        fallbacks=["openai/base-2"],
        system_prompt="Base prompt.",
        budgets=BudgetLimits(turn_tokens=1000, daily_usd=5.0),
        busy_mode="queue",
        policy=[PolicyRule(tool="run_command", decision="ask")],
    )


def _key(channel: str = "C1", *, platform: str = "slack", workspace: str = "T1",
         thread: str | None = None) -> ConversationKey:  # fmt: skip
    return ConversationKey(platform=platform, workspace=workspace, channel=channel, thread=thread)  # type: ignore[arg-type]


PLACES = (
    ProfileSetting(name="anywhere", default=True, system_prompt="Default prompt."),
    ProfileSetting(name="slack", platform="slack", model="openai/slack"),
    ProfileSetting(name="team", platform="slack", workspace="T1", busy_mode="steer"),
    ProfileSetting(name="ops", channel="C1", system_prompt="Ops.", tools=["schedule_*"],
                   policy=[PolicyRule(tool="http_request", decision="deny")],
                   budget_turn_tokens=50, reply="all"),
    ProfileSetting(name="named-only", model="openai/special", api_base="http://special/v1"),
)  # fmt: skip


def test_the_most_specific_place_wins_and_a_thread_has_its_channels() -> None:
    profiles = _profiles(*PLACES)
    assert profiles.applied(_key("C1")).name == "ops"
    assert profiles.applied(_key("C1", thread="171.1")).name == "ops"
    assert profiles.applied(_key("C2")).name == "team"
    assert profiles.applied(_key("C2", workspace="T2")).name == "slack"
    assert profiles.applied(_key("C9", platform="discord", workspace="G1")).name == "anywhere"
    assert profiles.placed(_key("C1", platform="web", workspace="local")) is not None
    assert _profiles().applied(_key()).name is None  # no profiles: the settings' own


def test_what_a_profile_leaves_unset_is_the_settings() -> None:
    ops = _profiles(*PLACES).applied(_key("C1"))
    assert (ops.model, ops.api_base, ops.fallbacks) == (
        "openai/base",
        "http://base/v1",
        ("openai/base-2",),
    )
    assert ops.system_prompt == "Ops."
    assert ops.offers("schedule_task")
    assert not ops.offers("http_request")
    assert [r.tool for r in ops.policy] == ["http_request", "run_command"]  # its own first
    assert ops.budgets.turn_tokens == 50
    assert ops.budgets.daily_usd == 5.0
    assert ops.busy_mode == "queue"
    assert ops.reply == "all"
    own = _profiles(*PLACES).applied(_key("C2", workspace="T2"))
    # Its own model: not the settings' server nor fallbacks.
    assert (own.model, own.api_base, own.fallbacks) == ("openai/slack", None, ())
    assert own.offers("anything")
    assert own.reply == "mentions"


def test_an_admins_choice_wins_and_one_no_longer_configured_is_ignored() -> None:
    profiles = _profiles(*PLACES)
    chosen = profiles.applied(_key("C1"), pinned_profile="named-only")
    assert (chosen.name, chosen.model, chosen.pinned) == ("named-only", "openai/special", True)
    assert profiles.applied(_key("C1"), pinned_profile="gone").name == "ops"
    model = profiles.applied(_key("C1"), pinned_model="openai/special")
    assert (model.name, model.model, model.api_base, model.pinned) == (
        "ops", "openai/special", "http://special/v1", True
    )  # fmt: skip
    assert profiles.applied(_key("C1"), pinned_model="openai/unknown").model == "openai/base"
    assert profiles.models() == ["openai/base", "openai/base-2", "openai/slack", "openai/special"]


def test_bad_profiles_are_refused() -> None:
    with pytest.raises(ValidationError, match="default = true takes no place keys"):
        ProfileSetting(name="x", default=True, channel="C1")
    with pytest.raises(ValidationError):
        ProfileSetting(name="has spaces")
    with pytest.raises(ValidationError):
        ProfileSetting(name="x", reply="sometimes")  # type: ignore[arg-type]

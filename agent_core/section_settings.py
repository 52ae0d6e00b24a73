"""The sections of ``chatgate.toml`` that are tables of their own: ``[tools.*]``,
``[secrets]`` and ``[mcp.servers.*]`` (``agent_core.settings`` holds the rest)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent_core.permissions import PolicyRule


class RunCommandSettings(BaseModel):
    """``[tools.run_command]``: the sandbox's limits, network and backends."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout: float = Field(30.0, gt=0, le=3600)
    cpu_seconds: int = Field(20, ge=1)
    memory_mb: int = Field(512, ge=16)
    processes: int = Field(64, ge=4, le=100_000)
    file_size_mb: int = Field(64, ge=1)
    tmp_mb: int = Field(64, ge=1)
    output_limit: int = Field(8_000, ge=200)
    # "none": no network at all, loopback included; "full": the host's network.
    network: Literal["none", "full"] = "none"
    # The bubblewrap binary (a name on PATH or a path).
    bwrap: str = Field("bwrap", min_length=1)
    # podman or docker (a name on PATH or a path); unset: podman if installed, else docker.
    container_engine: str | None = Field(None, min_length=1)
    # The image commands run in with the container backend (it must be pulled already).
    image: str = Field("debian:bookworm-slim", min_length=1)


class HttpRequestSettings(BaseModel):
    """``[tools.http_request]``: where the agent may send requests."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    allowed_hosts: list[str] = Field(default_factory=list)
    timeout: float = Field(30.0, gt=0, le=600)
    output_limit: int = Field(8_000, ge=200)


class SecretSetting(BaseModel):
    """``[secrets]``: ``NAME = "ENV_VAR"`` (any host ``http_request`` may reach), or
    ``[secrets.NAME] env = "ENV_VAR", hosts = ["api.example.com"]`` (those hosts only)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env: str = Field(min_length=1)
    # host or host:port entries, as in allowed_hosts; None: not bound (doctor warns).
    hosts: list[str] | None = Field(None, min_length=1)


class ToolSettings(BaseModel):
    """``[tools.*]`` sections."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_command: RunCommandSettings = Field(default_factory=RunCommandSettings)
    http_request: HttpRequestSettings = Field(default_factory=HttpRequestSettings)


class McpServerSettings(BaseModel):
    """``[mcp.servers.NAME]``: one MCP server, started as a subprocess (``command``,
    stdio) or reached over streamable HTTP (``url``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(60.0, gt=0, le=3600)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError("set either command (a stdio server) or url (streamable HTTP)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"expected an http:// or https:// URL, got {self.url!r}")
        return self


class McpSettings(BaseModel):
    """``[mcp]``: MCP servers whose tools the agent may use (named ``server__tool``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    servers: dict[str, McpServerSettings] = Field(default_factory=dict)

    @field_validator("servers")
    @classmethod
    def _names(cls, value: dict[str, McpServerSettings]) -> dict[str, McpServerSettings]:
        for name in value:
            if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,23}", name):
                raise ValueError(
                    f"server names are up to 24 lower-case letters, digits and -, not {name!r}"
                )
        return value


class SuggestedPrompt(BaseModel):
    """One of ``[[slack_suggested_prompts]]``: offered when someone opens the app's
    Messages tab in Slack (a button that sends ``message`` as theirs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    title: str = Field(min_length=1)
    message: str = Field(min_length=1)


# Slack shows at most four.
SuggestedPrompts = Annotated[list[SuggestedPrompt], Field(max_length=4)]


class ProfileSetting(BaseModel):
    """A ``[[profile]]`` of chatgate.toml: what the agent is where it applies (its model,
    system prompt, tools, policies, budgets, busy mode, whether it answers every message),
    and where that is (a platform, a workspace or guild, a channel or chat; a thread has
    its channel's). One with no place applies nowhere by itself: ``/profile NAME`` (an
    admin) or ``chatgate replay --profile NAME`` choose it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    # Where it applies: every key given must hold. The most specific profile wins
    # (channel, then workspace, then platform, then ``default``); in a tie, the first.
    platform: Literal["slack", "telegram", "discord", "web"] | None = None
    workspace: str | None = Field(None, min_length=1)
    channel: str | None = Field(None, min_length=1)
    # Applies wherever no profile with a place does.
    default: bool = False
    # A litellm model name; unset: CHATGATE_MODEL.
    model: str | None = Field(None, min_length=1)
    # Its server (OpenAI-compatible); unset: CHATGATE_MODEL_API_BASE on the same provider.
    api_base: str | None = Field(None, min_length=1)
    # Tried in order when the model fails; unset: CHATGATE_FALLBACK_MODELS.
    fallback_models: list[str] | None = None
    # Unset: CHATGATE_SYSTEM_PROMPT.
    system_prompt: str | None = Field(None, min_length=1)
    # The tools offered: names or shell patterns ("memory_*", "github__*"); unset: all.
    tools: list[str] | None = None
    # Checked before the top-level [[policy]] rules (the first rule that matches decides).
    policy: list[PolicyRule] = Field(default_factory=list)
    # Budgets in place of the settings' (unset: the settings').
    budget_turn_tokens: int | None = Field(None, ge=1)
    budget_conversation_tokens: int | None = Field(None, ge=1)
    budget_conversation_usd: float | None = Field(None, gt=0)
    budget_user_daily_tokens: int | None = Field(None, ge=1)
    budget_user_daily_usd: float | None = Field(None, gt=0)
    # A conversation's busy mode where it set none (unset: CHATGATE_BUSY_MODE).
    busy_mode: Literal["queue", "steer", "interrupt", "collect"] | None = None
    # "all": answer every message in its channels and groups, not only those that mention
    # the agent (the platform must deliver them: see README); unset: "mentions".
    reply: Literal["all", "mentions"] | None = None

    @model_validator(mode="after")
    def _placed_once(self) -> ProfileSetting:
        if self.default and (self.platform or self.workspace or self.channel):
            raise ValueError(f"profile {self.name!r}: default = true takes no place keys")
        return self

    @property
    def place(self) -> int:
        """How specific its place is: 3 channel, 2 workspace, 1 platform, 0 default, -1
        none (it applies only when chosen)."""
        if self.channel:
            return 3
        if self.workspace:
            return 2
        if self.platform:
            return 1
        return 0 if self.default else -1

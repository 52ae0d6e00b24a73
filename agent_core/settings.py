"""chatgate's settings: environment variables, then ``chatgate.toml``, then defaults.

Every key in CONTRACT.md is a field here. In the environment a key is spelt as in the
contract (``CHATGATE_PORT``, ``SLACK_BOT_TOKEN``); in ``chatgate.toml`` it is lower-case
without the ``CHATGATE_`` prefix (``port = 8080``, ``slack_bot_token = "..."``).

Only the wiring points call ``agent_core.settings_loader.load_settings``; everything else
receives a :class:`Settings` instance.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from agent_core.events import PLATFORMS
from agent_core.permissions import PolicyRule
from agent_core.section_settings import (
    McpSettings,
    ProfileSetting,
    SecretSetting,
    SuggestedPrompts,
    ToolSettings,
)

DEFAULT_SYSTEM_PROMPT = (
    "You are chatgate, a helpful assistant working inside a team chat. "
    "Answer concisely and say so when you are not sure."
)

_UNPREFIXED = (
    "slack_bot_token",
    "slack_signing_secret",
    "slack_app_token",
    "slack_api_url",
    "telegram_bot_token",
    "telegram_webhook_secret",
    "telegram_api_url",
    "discord_bot_token",
    "discord_api_url",
    "discord_gateway_url",
    "discord_command_guilds",
)


# Tokens copied from examples and never changed.
_PLACEHOLDERS = frozenset(
    {"replace-me", "changeme", "change-me", "secret", "token", "password", "your-token-here"}
)


def env_name(field: str) -> str:
    """The environment variable for a settings field (``port`` -> ``CHATGATE_PORT``)."""
    return field.upper() if field in _UNPREFIXED else f"CHATGATE_{field.upper()}"


def _key(field: str) -> Any:
    return Field(None, validation_alias=AliasChoices(env_name(field), field))


def _list_key(field: str) -> Any:
    return Field(default_factory=list, validation_alias=AliasChoices(env_name(field), field))


CommaList = Annotated[list[str], NoDecode]


class Settings(BaseSettings):
    """Everything an operator can set. Field names are the ``chatgate.toml`` keys."""

    model_config = SettingsConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    host: str = Field("127.0.0.1", validation_alias=AliasChoices("CHATGATE_HOST", "host"))
    port: int = Field(8080, ge=0, le=65535, validation_alias=AliasChoices("CHATGATE_PORT", "port"))
    database_url: str = Field(
        "sqlite+aiosqlite:///./.chatgate/chatgate.db",
        validation_alias=AliasChoices("CHATGATE_DATABASE_URL", "database_url"),
    )
    redis_url: str | None = _key("redis_url")
    config: Path | None = Field(None, validation_alias=AliasChoices("CHATGATE_CONFIG"))

    model: str | None = _key("model")
    model_api_base: str | None = _key("model_api_base")
    model_api_key: SecretStr | None = _key("model_api_key")
    fallback_models: CommaList = _list_key("fallback_models")
    model_context_tokens: int | None = Field(
        None,
        ge=256,
        validation_alias=AliasChoices("CHATGATE_MODEL_CONTEXT_TOKENS", "model_context_tokens"),
    )
    model_timeout: float = Field(
        120.0, gt=0, validation_alias=AliasChoices("CHATGATE_MODEL_TIMEOUT", "model_timeout")
    )
    model_retries: int = Field(
        2, ge=0, le=10, validation_alias=AliasChoices("CHATGATE_MODEL_RETRIES", "model_retries")
    )
    # Import the model library and build its client when the gateway starts, so the first
    # reply after a start does not wait for it; false leaves that to the first model call
    # (a gateway that never calls the model never pays for it). Workers always load it
    # before they fork their pool.
    model_warm_up: bool = Field(
        True, validation_alias=AliasChoices("CHATGATE_MODEL_WARM_UP", "model_warm_up")
    )
    # What a message that arrives while a turn runs in its conversation does: wait for its
    # own turn, join the running one, stop it and start afresh with both, or be gathered
    # with the messages around it (README, "While the agent works"); ``/busy`` sets it per
    # conversation.
    busy_mode: Literal["queue", "steer", "interrupt", "collect"] = Field(
        "queue", validation_alias=AliasChoices("CHATGATE_BUSY_MODE", "busy_mode")
    )
    # ``collect``: how long a conversation must be quiet before its messages are answered.
    collect_seconds: float = Field(
        3.0,
        gt=0,
        le=60,
        validation_alias=AliasChoices("CHATGATE_COLLECT_SECONDS", "collect_seconds"),
    )
    # The speech-to-text model for voice notes and audio files (litellm's name, e.g.
    # "openai/whisper-1"); unset, audio is not transcribed. It uses CHATGATE_MODEL_API_BASE
    # and _KEY when it is on the chat model's provider.
    transcribe_model: str | None = _key("transcribe_model")
    # The file store in an S3-compatible bucket (for gateways and workers on several
    # machines); unset: the state directory. Credentials: boto3's chain (AWS_* variables).
    files_s3_bucket: str | None = _key("files_s3_bucket")
    files_s3_prefix: str = Field(
        "chatgate/", validation_alias=AliasChoices("CHATGATE_FILES_S3_PREFIX", "files_s3_prefix")
    )
    files_s3_endpoint: str | None = _key("files_s3_endpoint")
    files_s3_region: str | None = _key("files_s3_region")
    # Whether the model reads images: "auto" asks litellm's model map; true or false for
    # a model it does not know (a proxy's name, a local model).
    model_vision: Literal["auto", "true", "false"] = Field(
        "auto", validation_alias=AliasChoices("CHATGATE_MODEL_VISION", "model_vision")
    )
    # Files people send: the largest one read, and all of one message's together (MB);
    # how long fetched files are kept (days).
    file_max_mb: float = Field(
        25.0, gt=0, le=2048, validation_alias=AliasChoices("CHATGATE_FILE_MAX_MB", "file_max_mb")
    )
    message_files_max_mb: float = Field(
        50.0,
        gt=0,
        le=4096,
        validation_alias=AliasChoices("CHATGATE_MESSAGE_FILES_MAX_MB", "message_files_max_mb"),
    )
    file_retention_days: float = Field(
        30.0,
        gt=0,
        validation_alias=AliasChoices("CHATGATE_FILE_RETENTION_DAYS", "file_retention_days"),
    )
    # Message text and journal content (tool arguments and results, model answers) older
    # than this is removed (checked at start and hourly); counts and costs stay. None: kept.
    retention_days: float | None = Field(
        None, gt=0, validation_alias=AliasChoices("CHATGATE_RETENTION_DAYS", "retention_days")
    )
    audit_retention_days: float = Field(
        365.0,
        gt=0,
        validation_alias=AliasChoices("CHATGATE_AUDIT_RETENTION_DAYS", "audit_retention_days"),
    )
    # Show what a turn that takes a while is doing on the message that opened it (a reaction:
    # working, waiting for a person, done, failed) and a typing indicator meanwhile.
    status_marks: bool = Field(
        True, validation_alias=AliasChoices("CHATGATE_STATUS_MARKS", "status_marks")
    )
    # Show replies as they are written where the platform can (streamed model calls; see
    # README, "Replies as they are written"); false posts every reply once it is whole.
    stream_replies: bool = Field(
        True, validation_alias=AliasChoices("CHATGATE_STREAM_REPLIES", "stream_replies")
    )
    # The cheaper model for background work: folding old history into the running summary,
    # picking facts out of turns, the nightly memory review. Default: ``model``.
    summary_model: str | None = _key("summary_model")
    # Pick durable facts out of every answered turn (one summary-model call per turn).
    memory_extract: bool = Field(
        False, validation_alias=AliasChoices("CHATGATE_MEMORY_EXTRACT", "memory_extract")
    )
    # When to review new facts (merge repeats, supersede contradicted ones): a cron
    # expression in UTC, or "off".
    memory_maintenance: str = Field(
        "0 3 * * *",
        validation_alias=AliasChoices("CHATGATE_MEMORY_MAINTENANCE", "memory_maintenance"),
    )
    reply_max_tokens: int = Field(
        1024,
        ge=16,
        validation_alias=AliasChoices("CHATGATE_REPLY_MAX_TOKENS", "reply_max_tokens"),
    )
    system_prompt: str = Field(
        DEFAULT_SYSTEM_PROMPT,
        min_length=1,
        validation_alias=AliasChoices("CHATGATE_SYSTEM_PROMPT", "system_prompt"),
    )

    admins: CommaList = _list_key("admins")
    access: Literal["pairing", "allowlist", "open"] = Field(
        "pairing", validation_alias=AliasChoices("CHATGATE_ACCESS", "access")
    )
    allow: CommaList = _list_key("allow")
    web_token: SecretStr | None = _key("web_token")
    # Set: GET /metrics wants Authorization: Bearer METRICS_TOKEN.
    metrics_token: SecretStr | None = _key("metrics_token")
    pairing_minutes: float = Field(
        60.0, gt=0, validation_alias=AliasChoices("CHATGATE_PAIRING_MINUTES", "pairing_minutes")
    )
    pairing_max_pending: int = Field(
        3,
        ge=1,
        validation_alias=AliasChoices("CHATGATE_PAIRING_MAX_PENDING", "pairing_max_pending"),
    )
    rate_burst: int = Field(
        8, ge=1, validation_alias=AliasChoices("CHATGATE_RATE_BURST", "rate_burst")
    )
    rate_per_minute: float = Field(
        12.0, gt=0, validation_alias=AliasChoices("CHATGATE_RATE_PER_MINUTE", "rate_per_minute")
    )

    max_concurrent_turns: int = Field(
        64,
        ge=1,
        le=10_000,
        validation_alias=AliasChoices("CHATGATE_MAX_CONCURRENT_TURNS", "max_concurrent_turns"),
    )
    lease_seconds: float = Field(
        30.0, ge=1, validation_alias=AliasChoices("CHATGATE_LEASE_SECONDS", "lease_seconds")
    )
    drain_seconds: float = Field(
        20.0, ge=0, validation_alias=AliasChoices("CHATGATE_DRAIN_SECONDS", "drain_seconds")
    )
    # How often a gateway asks a webhook platform whether updates wait for it (Telegram's
    # getWebhookInfo), how long silence with updates waiting makes it deaf, and how often
    # a deaf platform is logged.
    deaf_check_seconds: float = Field(
        60.0,
        ge=1,
        validation_alias=AliasChoices("CHATGATE_DEAF_CHECK_SECONDS", "deaf_check_seconds"),
    )
    # run_command's boundary: auto (bwrap, else a container engine, else not offered),
    # bwrap, container, or none (a plain subprocess: no boundary; warned about).
    sandbox: Literal["auto", "bwrap", "container", "none"] = Field(
        "auto", validation_alias=AliasChoices("CHATGATE_SANDBOX", "sandbox")
    )
    tools_offered: int = Field(
        32, ge=4, le=512, validation_alias=AliasChoices("CHATGATE_TOOLS_OFFERED", "tools_offered")
    )
    # Budgets (unset = no limit): tokens are prompt plus completion tokens; USD is
    # litellm's price for the model. Per user and for everyone they count per UTC day.
    budget_turn_tokens: int | None = Field(
        None,
        gt=0,
        validation_alias=AliasChoices("CHATGATE_BUDGET_TURN_TOKENS", "budget_turn_tokens"),
    )
    budget_conversation_tokens: int | None = Field(
        None,
        gt=0,
        validation_alias=AliasChoices(
            "CHATGATE_BUDGET_CONVERSATION_TOKENS", "budget_conversation_tokens"
        ),
    )
    budget_conversation_usd: float | None = Field(
        None,
        gt=0,
        validation_alias=AliasChoices(
            "CHATGATE_BUDGET_CONVERSATION_USD", "budget_conversation_usd"
        ),
    )
    budget_user_daily_tokens: int | None = Field(
        None,
        gt=0,
        validation_alias=AliasChoices(
            "CHATGATE_BUDGET_USER_DAILY_TOKENS", "budget_user_daily_tokens"
        ),
    )
    budget_user_daily_usd: float | None = Field(
        None,
        gt=0,
        validation_alias=AliasChoices("CHATGATE_BUDGET_USER_DAILY_USD", "budget_user_daily_usd"),
    )
    budget_daily_usd: float | None = Field(
        None, gt=0, validation_alias=AliasChoices("CHATGATE_BUDGET_DAILY_USD", "budget_daily_usd")
    )
    budget_warn_at: float = Field(
        0.8, gt=0, le=1, validation_alias=AliasChoices("CHATGATE_BUDGET_WARN_AT", "budget_warn_at")
    )
    # Schedules and queued work (issue #4; ARCHITECTURE.md, "Queued path").
    timezone: str = Field("UTC", validation_alias=AliasChoices("CHATGATE_TIMEZONE", "timezone"))
    schedule_min_seconds: float = Field(
        60.0,
        ge=1,
        validation_alias=AliasChoices("CHATGATE_SCHEDULE_MIN_SECONDS", "schedule_min_seconds"),
    )
    schedule_tick_seconds: float = Field(
        5.0,
        gt=0,
        le=300,
        validation_alias=AliasChoices("CHATGATE_SCHEDULE_TICK_SECONDS", "schedule_tick_seconds"),
    )
    schedule_grace_seconds: float = Field(
        120.0,
        ge=0,
        validation_alias=AliasChoices("CHATGATE_SCHEDULE_GRACE_SECONDS", "schedule_grace_seconds"),
    )
    schedule_catch_up_max: int = Field(
        10,
        ge=1,
        le=1000,
        validation_alias=AliasChoices("CHATGATE_SCHEDULE_CATCH_UP_MAX", "schedule_catch_up_max"),
    )
    schedule_failure_limit: int = Field(
        3,
        ge=1,
        validation_alias=AliasChoices("CHATGATE_SCHEDULE_FAILURE_LIMIT", "schedule_failure_limit"),
    )
    schedules_per_conversation: int = Field(
        50,
        ge=1,
        validation_alias=AliasChoices(
            "CHATGATE_SCHEDULES_PER_CONVERSATION", "schedules_per_conversation"
        ),
    )
    # A trigger's request body, at most (a larger one gets 413), and fires per hour.
    trigger_max_bytes: int = Field(
        65_536, ge=1, le=1_048_576, validation_alias=AliasChoices("CHATGATE_TRIGGER_MAX_BYTES")
    )
    trigger_per_hour: int = Field(
        60, ge=1, le=3600, validation_alias=AliasChoices("CHATGATE_TRIGGER_PER_HOUR")
    )
    job_attempts: int = Field(
        4, ge=1, le=20, validation_alias=AliasChoices("CHATGATE_JOB_ATTEMPTS", "job_attempts")
    )
    job_backoff_seconds: float = Field(
        10.0,
        ge=0,
        validation_alias=AliasChoices("CHATGATE_JOB_BACKOFF_SECONDS", "job_backoff_seconds"),
    )
    job_concurrency: int = Field(
        2,
        ge=1,
        le=256,
        validation_alias=AliasChoices("CHATGATE_JOB_CONCURRENCY", "job_concurrency"),
    )
    job_time_limit_seconds: float = Field(
        900.0,
        ge=10,
        validation_alias=AliasChoices("CHATGATE_JOB_TIME_LIMIT_SECONDS", "job_time_limit_seconds"),
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", validation_alias=AliasChoices("CHATGATE_LOG_LEVEL", "log_level")
    )
    log_format: Literal["console", "json"] = Field(
        "console", validation_alias=AliasChoices("CHATGATE_LOG_FORMAT", "log_format")
    )
    state_dir: Path = Field(
        Path(".chatgate"), validation_alias=AliasChoices("CHATGATE_STATE_DIR", "state_dir")
    )
    approval_minutes: float = Field(
        30.0,
        gt=0,
        validation_alias=AliasChoices("CHATGATE_APPROVAL_MINUTES", "approval_minutes"),
    )
    max_steps: int = Field(
        16, ge=1, le=200, validation_alias=AliasChoices("CHATGATE_MAX_STEPS", "max_steps")
    )
    policy: list[PolicyRule] = _list_key("policy")
    # Named models and system prompts to replay and evaluate with (``[[profile]]``).
    profile: list[ProfileSetting] = _list_key("profile")
    secrets: dict[str, SecretSetting] = Field(
        default_factory=dict, validation_alias=AliasChoices("CHATGATE_SECRETS", "secrets")
    )
    tools: ToolSettings = Field(
        default_factory=lambda: ToolSettings(),
        validation_alias=AliasChoices("CHATGATE_TOOLS", "tools"),
    )
    mcp: McpSettings = Field(
        default_factory=lambda: McpSettings(),
        validation_alias=AliasChoices("CHATGATE_MCP", "mcp"),
    )
    # Testing only: step boundaries at which the process kills itself. From the
    # environment only (load_settings refuses it in chatgate.toml).
    test_fault: CommaList = _list_key("test_fault")

    slack_bot_token: SecretStr | None = _key("slack_bot_token")
    slack_signing_secret: SecretStr | None = _key("slack_signing_secret")
    slack_app_token: SecretStr | None = _key("slack_app_token")
    slack_api_url: str = Field(
        "https://slack.com/api/", validation_alias=AliasChoices("SLACK_API_URL", "slack_api_url")
    )
    # Offered when someone opens the app's Messages tab (README, "Slack").
    slack_suggested_prompts: SuggestedPrompts = _list_key("slack_suggested_prompts")
    telegram_bot_token: SecretStr | None = _key("telegram_bot_token")
    telegram_webhook_secret: SecretStr | None = _key("telegram_webhook_secret")
    telegram_api_url: str = Field(
        "https://api.telegram.org/bot",
        validation_alias=AliasChoices("TELEGRAM_API_URL", "telegram_api_url"),
    )
    discord_bot_token: SecretStr | None = _key("discord_bot_token")
    discord_api_url: str = Field(
        "https://discord.com/api/v10",
        validation_alias=AliasChoices("DISCORD_API_URL", "discord_api_url"),
    )
    discord_gateway_url: str = Field(
        "wss://gateway.discord.gg",
        validation_alias=AliasChoices("DISCORD_GATEWAY_URL", "discord_gateway_url"),
    )
    # Guilds whose application commands chatgate registers (unset: global commands).
    discord_command_guilds: CommaList = _list_key("discord_command_guilds")
    # How far back a new Discord gateway session reads what was written while no session
    # heard (0: not at all).
    discord_catch_up_seconds: float = Field(
        86400.0,
        ge=0,
        validation_alias=AliasChoices(
            "CHATGATE_DISCORD_CATCH_UP_SECONDS", "discord_catch_up_seconds"
        ),
    )

    @field_validator(
        "fallback_models", "admins", "allow", "test_fault", "discord_command_guilds", mode="before"
    )
    @classmethod
    def _split_commas(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("secrets", mode="before")
    @classmethod
    def _secret_forms(cls, value: object) -> object:
        if not isinstance(value, Mapping):
            return value
        forms: dict[object, object] = {}
        for name, setting in value.items():
            if not str(name).replace("_", "").isalnum():
                raise ValueError(f"secret names are letters, digits and _, not {name!r}")
            if isinstance(setting, str):
                if not setting:
                    raise ValueError(f"secret {name} needs the environment variable that holds it")
                setting = {"env": setting}
            forms[name] = setting
        return forms

    @field_validator("admins", "allow")
    @classmethod
    def _platform_users(cls, value: list[str]) -> list[str]:
        for entry in value:
            platform, sep, rest = entry.partition(":")
            if not sep or not rest or platform not in PLATFORMS:
                raise ValueError(
                    f"expected platform:user_id entries with platform one of "
                    f"{', '.join(PLATFORMS)}, got {entry!r}"
                )
        return value

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        scheme, sep, rest = value.partition("://")
        if not sep:
            raise ValueError(
                "expected a URL like sqlite+aiosqlite:///path.db or postgresql+asyncpg://host/db"
            )
        if scheme in ("sqlite", "sqlite+aiosqlite"):
            return f"sqlite+aiosqlite://{rest}"
        if scheme in ("postgres", "postgresql", "postgresql+asyncpg"):
            return f"postgresql+asyncpg://{rest}"
        raise ValueError(
            f"unsupported database {scheme!r}: use sqlite+aiosqlite:// or postgresql+asyncpg://"
        )

    @field_validator("memory_maintenance")
    @classmethod
    def _cron_or_off(cls, value: str) -> str:
        value = value.strip()
        if value.lower() == "off":
            return "off"
        from agent_core.events import utcnow
        from agent_core.scheduling.recurrence import ScheduleError, parse_recurrence

        try:
            recurrence = parse_recurrence(value, "UTC", now=utcnow())
        except ScheduleError as exc:
            raise ValueError(f'{exc}; or "off"') from None
        if recurrence.kind != "cron":
            raise ValueError(f'{value!r} is not a cron expression (five fields) or "off"')
        return recurrence.spec

    @field_validator("profile")
    @classmethod
    def _profile_names(cls, value: list[ProfileSetting]) -> list[ProfileSetting]:
        names = [p.name for p in value]
        twice = next((n for n in names if names.count(n) > 1), None)
        if twice is not None:
            raise ValueError(f"two profiles are named {twice!r}")
        return value

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        import zoneinfo

        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {value!r}; use an IANA name like Europe/Berlin"
            ) from None
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("expected redis://host:port/db, rediss://... or unix://path")
        return value

    @field_validator(
        "model_api_base",
        "slack_api_url",
        "telegram_api_url",
        "discord_api_url",
        "files_s3_endpoint",
        mode="after",
    )
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
        return value

    @field_validator("tools")
    @classmethod
    def _network_needs_a_token(cls, value: ToolSettings, info: ValidationInfo) -> ToolSettings:
        # A command with the host's network reaches chatgate's own API on loopback; without
        # a token that API trusts loopback, so one approved command could decide the next.
        if value.run_command.network == "full" and info.data.get("web_token") is None:
            raise ValueError(
                '[tools.run_command] network = "full" needs CHATGATE_WEB_TOKEN set: without '
                "it, a command could reach chatgate's own API on loopback and decide approvals"
            )
        return value

    @field_validator("web_token")
    @classmethod
    def _web_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return value
        token = value.get_secret_value()
        if token.strip().lower().replace("_", "-") in _PLACEHOLDERS:
            raise ValueError("is a placeholder: generate one, e.g. `openssl rand -hex 24`")
        if len(token) < 16:
            raise ValueError(
                "must be at least 16 characters: generate one, e.g. `openssl rand -hex 24`"
            )
        return value

    @field_validator("telegram_bot_token")
    @classmethod
    def _telegram_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not re.fullmatch(r"\d+:[A-Za-z0-9_-]+", value.get_secret_value()):
            raise ValueError("expected the token BotFather gave, like 123456:ABC-DEF1234ghIkl")
        return value

    @field_validator("telegram_webhook_secret")
    @classmethod
    def _telegram_secret(cls, value: SecretStr | None) -> SecretStr | None:
        # What Telegram accepts as setWebhook's secret_token.
        if value is not None and not re.fullmatch(
            r"[A-Za-z0-9_-]{1,256}", value.get_secret_value()
        ):
            raise ValueError("expected 1 to 256 characters from A-Z, a-z, 0-9, _ and -")
        return value

    @field_validator("discord_gateway_url")
    @classmethod
    def _ws_url(cls, value: str) -> str:
        if not value.startswith(("ws://", "wss://")):
            raise ValueError(f"expected a ws:// or wss:// URL, got {value!r}")
        return value

"""Reading :class:`~agent_core.settings.Settings`: the environment over ``chatgate.toml``
over the defaults, and a bad key reported the way the user spelt it (``ConfigError``)."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource

from agent_core.errors import ConfigError
from agent_core.settings import Settings, env_name


class _MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source, reading a given mapping instead of os.environ."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls, case_sensitive=False)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {key.lower(): value for key, value in self._environ.items()}


def _config_path(environ: Mapping[str, str]) -> Path | None:
    configured = environ.get("CHATGATE_CONFIG")
    if configured:
        path = Path(configured)
        if not path.is_file():
            raise ConfigError("CHATGATE_CONFIG", f"expected a readable TOML file, {path} is not")
        return path
    default = Path("chatgate.toml")
    return default if default.is_file() else None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("CHATGATE_CONFIG", f"{path} is not valid TOML: {exc}") from exc
    except OSError as exc:
        raise ConfigError("CHATGATE_CONFIG", f"cannot read {path}: {exc.strerror}") from exc


def _field_for(loc: str) -> str | None:
    lowered = loc.lower()
    for name, info in Settings.model_fields.items():
        if lowered == name or lowered == env_name(name).lower():
            return name
        if _aliases(info) and lowered in _aliases(info):
            return name
    return None


def _aliases(info: FieldInfo) -> set[str]:
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        return {str(choice).lower() for choice in alias.choices}
    return set()


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read settings from ``environ`` (default ``os.environ``) and the TOML file.

    Raises :class:`ConfigError` naming the first bad key, spelt the way the user wrote it:
    the environment variable if it came from there, else the TOML key and file.
    """
    environ = os.environ if environ is None else environ
    path = _config_path(environ)
    from_file = _read_toml(path) if path else {}
    if "test_fault" in from_file:
        # A file can be left behind on a real deployment; a crash switch must not be.
        raise ConfigError(
            f"test_fault (in {path})",
            "fault points are for tests and come from the environment only "
            "(CHATGATE_TEST_FAULT); remove the key",
        )
    from_env = _MappingEnvSource(Settings, environ)()
    merged: dict[str, Any] = {}
    for key, value in from_file.items():
        # Only the lower-case field name is a TOML key; anything else is reported as unknown.
        merged[key] = value
    for key, value in from_env.items():
        merged[_field_for(key) or key] = value
    if path is not None:
        merged["config"] = path
    try:
        return Settings.model_validate(merged)
    except ValidationError as exc:
        raise _config_error(exc, environ=environ, path=path) from None


def _config_error(
    exc: ValidationError, *, environ: Mapping[str, str], path: Path | None
) -> ConfigError:
    error = exc.errors(include_url=False)[0]
    loc = str(error["loc"][0]) if error["loc"] else "?"
    field = _field_for(loc)
    if field is None:
        where = f" in {path}" if path else ""
        return ConfigError(loc, f"unknown setting{where}; see CONTRACT.md for the keys")
    variable = env_name(field)
    in_env = any(k.upper() == variable for k in environ)
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"][1:])
    key = variable if in_env or path is None else f"{field}{where} (in {path})"
    reason = str(error["msg"])
    if reason.startswith("Value error, "):
        reason = reason.removeprefix("Value error, ")
    value = error.get("input")
    # Custom checks already quote the value; URLs and tokens may carry credentials.
    quiet = error["type"] == "value_error" or field.endswith(("_url", "_token", "_key", "_secret"))
    shown = "" if quiet else f" (got {value!r})"
    return ConfigError(key, f"{reason[0].lower()}{reason[1:]}{shown}")

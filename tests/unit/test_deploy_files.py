"""The deploy files (deploy/): they parse, run real ``chatgate`` commands, set only real
settings, run as non-root, and give a stopping gateway longer than its drain.

Static checks only: no Docker, no cluster, no systemd. Commands are parsed by the CLI's own
parser (``gateway.cli.app``) and setting names are those ``Settings`` reads.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
import yaml
from pydantic import AliasChoices

from agent_core.errors import ConfigError
from agent_core.settings import Settings
from agent_core.settings_loader import load_settings
from gateway.cli import app as cli_app

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S = DEPLOY / "k8s"
SYSTEMD = DEPLOY / "systemd"
COMPOSE = DEPLOY / "compose.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
NGINX = DEPLOY / "nginx.conf"
COMPOSE_ENV = DEPLOY / "chatgate.env.example"
SYSTEMD_ENV = SYSTEMD / "chatgate.env.example"

# Variables under these prefixes are chatgate's: one that is no setting is a typo.
SETTING_PREFIXES = ("CHATGATE_", "SLACK_", "TELEGRAM_", "DISCORD_")
# Routes the proxy keeps to itself on purpose (metrics are scraped per gateway).
PROXY_BLOCKED = {"/metrics"}
YAML_FILES = sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")])
UNIT_FILES = sorted(SYSTEMD.glob("*.service"))


# ---- what the code accepts -------------------------------------------------------------


def _env_names(field: str) -> set[str]:
    alias = Settings.model_fields[field].validation_alias
    choices = alias.choices if isinstance(alias, AliasChoices) else [alias]
    return {choice for choice in choices if isinstance(choice, str) and choice.isupper()}


KNOWN_SETTINGS = frozenset(name for field in Settings.model_fields for name in _env_names(field))
SECRET_SETTINGS = frozenset(
    name
    for field, info in Settings.model_fields.items()
    if "SecretStr" in str(info.annotation)
    for name in _env_names(field)
)
DEFAULT_DRAIN = float(Settings.model_fields["drain_seconds"].default)
CLI_ROOT = typer.main.get_command(cli_app)


def cli_problem(argv: Sequence[str]) -> str | None:
    """None when ``chatgate ARGV`` parses with the CLI's own parser, else what is wrong.

    Only parses: no command's code runs."""
    command: Any = CLI_ROOT
    name, parent, rest = "chatgate", None, [str(arg) for arg in argv]
    try:
        while hasattr(command, "list_commands"):  # a group: the next word names a command
            ctx = typer.Context(command, info_name=name, parent=parent)
            choices = command.list_commands(ctx)
            if not rest or rest[0] not in choices:
                got = repr(rest[0]) if rest else "nothing"
                return f"{ctx.command_path} expects one of {', '.join(choices)}, got {got}"
            parent, name, command, rest = ctx, rest[0], command.get_command(ctx, rest[0]), rest[1:]
        with command.make_context(name, rest, parent=parent):
            return None
    except Exception as exc:  # click's usage errors, from whichever click typer brings
        message = getattr(exc, "format_message", None)
        return message() if callable(message) else str(exc)


def unknown_settings(names: Iterable[str]) -> list[str]:
    """The names under chatgate's prefixes that are no setting (case matters)."""
    return sorted(
        name
        for name in names
        if name.upper().startswith(SETTING_PREFIXES) and name not in KNOWN_SETTINGS
    )


@pytest.fixture
def clean_environ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings are loaded from the given values only: no chatgate.toml, no inherited keys."""
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.upper().startswith(SETTING_PREFIXES):
            monkeypatch.delenv(name)


def settings_problem(values: Mapping[str, str]) -> str | None:
    """None when chatgate accepts these settings' values, else the bad key and why."""
    known = {k: str(v) for k, v in values.items() if k in KNOWN_SETTINGS and k != "CHATGATE_CONFIG"}
    try:
        load_settings(known)
    except ConfigError as exc:
        return f"{exc.key}: {exc.reason}"
    return None


def seconds(text: object) -> float:
    """``45``, ``45s``, ``1m30s``, ``2min``, ``1h`` (compose and systemd durations)."""
    value = str(text).strip()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*(ms|min|h|m|s)", value)
    read = "".join(f"{n}{u}" for n, u in parts)
    assert read == value.replace(" ", ""), f"cannot read the duration {value!r}"
    scale = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600}
    return sum(float(n) * scale[u] for n, u in parts)


def env_file(path: Path) -> tuple[dict[str, str], set[str]]:
    """An env file's set values, and every name it mentions (commented-out examples too)."""
    values: dict[str, str] = {}
    mentioned: set[str] = set()
    for line in path.read_text().splitlines():
        match = re.fullmatch(r"(#\s*)?([A-Za-z_][A-Za-z0-9_]*)=(.*)", line.strip())
        if match:
            mentioned.add(match[2])
            if not match[1]:
                values[match[2]] = match[3]
    return values, mentioned


# ---- YAML ------------------------------------------------------------------------------


def test_deploy_has_yaml_files() -> None:
    """The compose file, the Kubernetes manifests and the Slack manifest are all there."""
    names = {path.relative_to(DEPLOY).as_posix() for path in YAML_FILES}
    assert {"compose.yaml", "k8s/gateway.yaml", "slack/manifest.yml"} <= names, names


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: p.relative_to(DEPLOY).as_posix())
def test_every_yaml_file_parses(path: Path) -> None:
    """yaml.safe_load_all reads every document of every YAML file under deploy/."""
    try:
        documents = list(yaml.safe_load_all(path.read_text()))
    except yaml.YAMLError as exc:
        pytest.fail(f"{path.relative_to(DEPLOY)} is not valid YAML: {exc}")
    assert any(doc is not None for doc in documents), f"{path.relative_to(DEPLOY)} is empty"


def test_known_settings_come_from_the_settings_class() -> None:
    """The names the checks below accept are Settings' own (guards the derivation)."""
    assert {"CHATGATE_DRAIN_SECONDS", "CHATGATE_DATABASE_URL", "SLACK_BOT_TOKEN"} <= KNOWN_SETTINGS
    assert {"SLACK_BOT_TOKEN", "CHATGATE_MODEL_API_KEY", "CHATGATE_WEB_TOKEN"} <= SECRET_SETTINGS
    assert "CHATGATE_PORT" not in SECRET_SETTINGS
    assert cli_problem(["gateway"]) is None
    assert cli_problem(["gatewy"]) is not None
    assert cli_problem(["worker", "--bogus"]) is not None


# ---- Dockerfile ------------------------------------------------------------------------


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """(INSTRUCTION, arguments) per build stage, continuation lines joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, rest = (pending + line).partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    stages: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions:
        if keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((keyword, rest))
    return stages


def dockerfile_env() -> dict[str, str]:
    """What the final image's ENV instructions set."""
    env: dict[str, str] = {}
    for keyword, rest in dockerfile_stages()[-1]:
        if keyword != "ENV":
            continue
        words = shlex.split(rest)
        if words and "=" not in words[0]:  # the legacy form: ENV KEY value
            env[words[0]] = " ".join(words[1:])
            continue
        for word in words:
            key, _, value = word.partition("=")
            env[key] = value
    return env


def test_dockerfile_is_multi_stage_and_the_image_has_no_build_tools() -> None:
    """A build stage installs the package; the final stage only copies its virtualenv."""
    stages = dockerfile_stages()
    assert len(stages) >= 2, "deploy/Dockerfile: expected a build stage and a final stage"
    build_text = " ".join(rest for _, rest in stages[0])
    assert "pip install --require-hashes -r run.lock" in build_text, (
        "deploy/Dockerfile: the build stage must install the dependencies from the hashed lock"
    )
    assert "pip install --no-deps --no-build-isolation ." in build_text, (
        "deploy/Dockerfile: the build stage must install the project on top, resolving nothing"
    )
    final = stages[-1]
    assert any(k == "COPY" and "--from=" in rest for k, rest in final), (
        "deploy/Dockerfile: the final stage should copy the built virtualenv --from the build"
    )
    for keyword, rest in final:
        assert not (keyword == "RUN" and re.search(r"\b(build-essential|gcc)\b", rest)), (
            f"deploy/Dockerfile: the final stage installs build tools: RUN {rest}"
        )


def test_dockerfile_runs_as_a_non_root_user() -> None:
    """The final stage's USER is set and is neither root nor uid 0."""
    users = [rest for keyword, rest in dockerfile_stages()[-1] if keyword == "USER"]
    assert users, "deploy/Dockerfile: the final stage has no USER, so it runs as root"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), f"deploy/Dockerfile: USER {users[-1]} is root"


def test_dockerfile_healthcheck_polls_healthz_without_curl() -> None:
    """HEALTHCHECK hits /healthz with Python's standard library (slim has no curl)."""
    checks = [rest for keyword, rest in dockerfile_stages()[-1] if keyword == "HEALTHCHECK"]
    assert checks, "deploy/Dockerfile: no HEALTHCHECK"
    check = checks[-1]
    assert check.upper() != "NONE", "deploy/Dockerfile: HEALTHCHECK NONE"
    assert "/healthz" in check, f"deploy/Dockerfile: HEALTHCHECK does not poll /healthz: {check}"
    assert "urllib" in check, f"deploy/Dockerfile: HEALTHCHECK must use Python's urllib: {check}"
    assert not re.search(r"\b(curl|wget)\b", check), (
        f"deploy/Dockerfile: slim images have no curl or wget: {check}"
    )


def test_dockerfile_entrypoint_is_chatgate_and_cmd_a_real_command() -> None:
    """ENTRYPOINT ["chatgate"], and the default CMD is a command the CLI accepts."""
    final = dict(dockerfile_stages()[-1])
    assert json.loads(final["ENTRYPOINT"]) == ["chatgate"], (
        f"deploy/Dockerfile: ENTRYPOINT {final['ENTRYPOINT']}"
    )
    cmd = json.loads(final["CMD"])
    assert cmd == ["gateway"], f"deploy/Dockerfile: CMD {cmd}, expected the gateway"
    assert cli_problem(cmd) is None, f"deploy/Dockerfile: CMD {cmd}: {cli_problem(cmd)}"


@pytest.mark.usefixtures("clean_environ")
def test_dockerfile_env_sets_only_real_settings() -> None:
    """Every CHATGATE_* (and platform) variable the image sets is a setting, with a valid value."""
    env = dockerfile_env()
    assert unknown_settings(env) == [], (
        f"deploy/Dockerfile: ENV sets unknown settings {unknown_settings(env)}"
    )
    assert env.get("CHATGATE_HOST") == "0.0.0.0", (
        "deploy/Dockerfile: CHATGATE_HOST must be 0.0.0.0 (127.0.0.1 is unreachable)"
    )
    assert settings_problem(env) is None, f"deploy/Dockerfile: ENV {settings_problem(env)}"
    assert not set(env) & SECRET_SETTINGS, (
        f"deploy/Dockerfile: secrets baked into the image: {sorted(set(env) & SECRET_SETTINGS)}"
    )


# ---- compose ---------------------------------------------------------------------------


@cache
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def argv_of(command: object) -> list[str]:
    if isinstance(command, str):
        return shlex.split(command)
    assert isinstance(command, list), f"unexpected command {command!r}"
    return [str(word) for word in command]


def compose_chatgate_services() -> dict[str, dict[str, Any]]:
    """The services running the chatgate image (not postgres, redis, the proxy)."""
    return {
        name: service
        for name, service in compose()["services"].items()
        if str(service.get("image", "")).rsplit("/", 1)[-1].split(":")[0] == "chatgate"
    }


def compose_environment(service: Mapping[str, Any]) -> dict[str, str]:
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        return dict(str(item).partition("=")[::2] for item in environment)
    return {str(k): "" if v is None else str(v) for k, v in environment.items()}


def test_compose_commands_are_real_chatgate_commands() -> None:
    """Each chatgate service's command parses with the CLI's parser."""
    services = compose_chatgate_services()
    assert services, "deploy/compose.yaml: no service runs the chatgate image"
    for name, service in services.items():
        assert "command" in service, f"deploy/compose.yaml: service {name} has no command"
        argv = argv_of(service["command"])
        problem = cli_problem(argv)
        assert problem is None, f"deploy/compose.yaml: service {name}: chatgate {argv}: {problem}"


def test_compose_runs_every_role_twice_and_migrates_first() -> None:
    """Two gateways, workers and beats; all wait for the one-shot migrate to succeed."""
    replicas: dict[str, int] = {}
    for name, service in compose_chatgate_services().items():
        role = argv_of(service["command"])[0]
        replicas[role] = replicas.get(role, 0) + int(service.get("deploy", {}).get("replicas", 1))
        if role == "migrate":
            assert service.get("restart") in ("no", None), (
                f"deploy/compose.yaml: {name} is one-shot, it must not restart"
            )
            continue
        depends = service.get("depends_on") or {}
        condition = (
            depends.get("migrate", {}).get("condition") if isinstance(depends, dict) else None
        )
        assert condition == "service_completed_successfully", (
            f"deploy/compose.yaml: service {name} must depend on migrate with "
            f"condition service_completed_successfully, has {condition!r}"
        )
    assert replicas.get("migrate") == 1, f"deploy/compose.yaml: roles {replicas}"
    for role in ("gateway", "worker", "beat"):
        assert replicas.get(role, 0) >= 2, (
            f"deploy/compose.yaml: {role} runs {replicas.get(role, 0)}x"
        )


@pytest.mark.usefixtures("clean_environ")
def test_compose_sets_only_real_settings_and_no_secrets() -> None:
    """Environment keys are settings with valid values; tokens come from the env file, and
    passwords in URLs from ${VARIABLES}, never from compose.yaml itself."""
    for name, service in compose_chatgate_services().items():
        env = compose_environment(service)
        assert unknown_settings(env) == [], (
            f"deploy/compose.yaml: service {name} sets unknown settings {unknown_settings(env)}"
        )
        assert not set(env) & SECRET_SETTINGS, (
            f"deploy/compose.yaml: service {name} hard-codes {sorted(set(env) & SECRET_SETTINGS)};"
            " put them in the env_file"
        )
        for key, value in env.items():
            password = re.search(r"://[^/@:]*:([^@]*)@", value)
            assert password is None or password[1].startswith("${"), (
                f"deploy/compose.yaml: service {name}: {key} hard-codes a password"
            )
        assert settings_problem(env) is None, (
            f"deploy/compose.yaml: service {name}: {settings_problem(env)}"
        )
        assert service.get("env_file"), f"deploy/compose.yaml: service {name} has no env_file"


@pytest.mark.usefixtures("clean_environ")
def test_compose_env_file_example_names_real_settings() -> None:
    """deploy/chatgate.env.example sets (or shows, commented out) settings only."""
    values, mentioned = env_file(COMPOSE_ENV)
    assert unknown_settings(mentioned) == [], (
        f"{COMPOSE_ENV.relative_to(DEPLOY)}: unknown settings {unknown_settings(mentioned)}"
    )
    # Credentials are placeholders to replace (chatgate refuses the web token's at start).
    placeholders = set(values) & SECRET_SETTINGS
    others = {k: v for k, v in values.items() if k not in placeholders}
    assert settings_problem(others) is None, (
        f"{COMPOSE_ENV.relative_to(DEPLOY)}: {settings_problem(others)}"
    )
    if "CHATGATE_WEB_TOKEN" in values:
        problem = settings_problem({"CHATGATE_WEB_TOKEN": values["CHATGATE_WEB_TOKEN"]})
        assert problem is not None
        assert "placeholder" in problem


def test_compose_gateways_get_longer_than_the_drain() -> None:
    """stop_grace_period of each gateway exceeds CHATGATE_DRAIN_SECONDS."""
    for name, service in compose_chatgate_services().items():
        if argv_of(service["command"])[0] != "gateway":
            continue
        drain = float(compose_environment(service).get("CHATGATE_DRAIN_SECONDS", DEFAULT_DRAIN))
        grace = seconds(service.get("stop_grace_period", "10s"))
        assert grace > drain, (
            f"deploy/compose.yaml: service {name}: stop_grace_period {grace}s is not above "
            f"CHATGATE_DRAIN_SECONDS {drain}s"
        )


# ---- nginx -----------------------------------------------------------------------------


def nginx_locations() -> list[tuple[str, str, str]]:
    """(modifier, pattern, body) for each location block."""
    text = re.sub(r"#[^\n]*", "", NGINX.read_text())
    return [
        (m[1] or "", m[2], m[3])
        for m in re.finditer(r"location\s+(=|~\*?|\^~)?\s*(\S+)\s*\{([^}]*)\}", text)
    ]


def nginx_location_for(path: str) -> tuple[str, str, str] | None:
    """The location nginx picks for ``path``: exact, then regex (first), then longest prefix."""
    locations = nginx_locations()
    for location in locations:
        if location[0] == "=" and location[1] == path:
            return location
    prefixes = [loc for loc in locations if loc[0] in ("", "^~") and path.startswith(loc[1])]
    longest = max(prefixes, key=lambda loc: len(loc[1]), default=None)
    if longest is not None and longest[0] == "^~":
        return longest
    for location in locations:
        flags = re.IGNORECASE if location[0] == "~*" else 0
        if location[0].startswith("~") and re.search(location[1], path, flags):
            return location
    return longest


@pytest.mark.usefixtures("clean_environ")
def test_nginx_proxies_every_gateway_route_to_every_gateway() -> None:
    """Each route the gateway serves (but /metrics) reaches the upstream, and the upstream
    lists every compose gateway on CHATGATE_PORT."""
    from gateway.app import build_app

    gateways = {
        name: compose_environment(service).get("CHATGATE_PORT", "8080")
        for name, service in compose_chatgate_services().items()
        if argv_of(service["command"])[0] == "gateway"
    }
    upstream = set(re.findall(r"^\s*server\s+([\w.-]+:\d+)", NGINX.read_text(), re.MULTILINE))
    expected = {f"{name}:{port}" for name, port in gateways.items()}
    assert upstream == expected, f"deploy/nginx.conf: upstream {upstream}, expected {expected}"

    routes = build_app(load_settings({})).router.resources()
    paths = {re.sub(r"\{[^}]+\}", "x1", r.canonical) for r in routes}
    paths = {path + "/app.js" if path == "/static" else path for path in paths}
    assert {"/slack/events", "/telegram/webhook", "/", "/api/messages"} <= paths, paths
    for path in sorted(paths - PROXY_BLOCKED):
        location = nginx_location_for(path)
        body = location[2] if location is not None else ""
        assert "proxy_pass" in body, (
            f"deploy/nginx.conf: the gateway route {path} is not proxied (location {location})"
        )
    stream = nginx_location_for("/api/conversations/x1/stream")
    assert "proxy_buffering off" in (stream[2] if stream is not None else ""), (
        "deploy/nginx.conf: the web chat's event stream must not be buffered"
    )


# ---- Kubernetes ------------------------------------------------------------------------


@cache
def k8s_documents() -> tuple[tuple[str, dict[str, Any]], ...]:
    found = []
    for path in sorted([*K8S.glob("*.yaml"), *K8S.glob("*.yml")]):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found.append((f"k8s/{path.name}", doc))
    return tuple(found)


def k8s_kind(kind: str) -> list[tuple[str, dict[str, Any]]]:
    return [(where, doc) for where, doc in k8s_documents() if doc.get("kind") == kind]


def pod_spec(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    spec = doc.get("spec", {})
    if doc.get("kind") == "CronJob":
        spec = spec.get("jobTemplate", {}).get("spec", {})
    template = spec.get("template")
    return template.get("spec") if isinstance(template, dict) else None


def k8s_containers() -> Iterator[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """(where, workload, pod spec, container) for every container of every workload."""
    for where, doc in k8s_documents():
        spec = pod_spec(doc)
        if spec is None:
            continue
        label = f"{where} {doc['kind']}/{doc['metadata']['name']}"
        for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
            yield f"{label} container {container['name']}", doc, spec, container


def is_chatgate_image(image: object) -> bool:
    return str(image).rsplit("/", 1)[-1].split(":")[0].split("@")[0] == "chatgate"


def k8s_argv(where: str, container: Mapping[str, Any]) -> list[str]:
    """What follows ``chatgate``: the image's ENTRYPOINT is chatgate, so args alone, or a
    command that starts with chatgate."""
    command = [str(word) for word in container.get("command", [])]
    args = [str(word) for word in container.get("args", [])]
    if command:
        assert Path(command[0]).name == "chatgate", f"{where}: command {command} is not chatgate"
        return command[1:] + args
    return args


def configmaps() -> dict[str, dict[str, str]]:
    return {
        doc["metadata"]["name"]: {k: str(v) for k, v in (doc.get("data") or {}).items()}
        for _, doc in k8s_kind("ConfigMap")
    }


def container_settings(container: Mapping[str, Any]) -> dict[str, str]:
    """The settings a container gets from its ConfigMaps (envFrom) and env values."""
    values: dict[str, str] = {}
    maps = configmaps()
    for source in container.get("envFrom", []):
        name = source.get("configMapRef", {}).get("name")
        values.update(maps.get(name, {}))
    for item in container.get("env", []):
        if "value" in item:
            values[item["name"]] = str(item["value"])
    return values


def k8s_role(role: str) -> list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]]:
    return [
        found
        for found in k8s_containers()
        if is_chatgate_image(found[3].get("image")) and k8s_argv(found[0], found[3])[:1] == [role]
    ]


def k8s_one(role: str) -> tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The one workload running ``chatgate ROLE``."""
    found = k8s_role(role)
    assert len(found) == 1, f"deploy/k8s: expected one {role} container, found {len(found)}"
    return found[0]


def test_k8s_commands_are_real_chatgate_commands() -> None:
    """Every chatgate container's command and args parse with the CLI's parser."""
    seen = 0
    for where, _doc, _spec, container in k8s_containers():
        if not is_chatgate_image(container.get("image")):
            continue
        seen += 1
        argv = k8s_argv(where, container)
        problem = cli_problem(argv)
        assert problem is None, f"{where}: chatgate {argv}: {problem}"
    assert seen, "deploy/k8s: no container runs the chatgate image"


def test_k8s_runs_migrate_job_gateways_workers_and_two_beats() -> None:
    """A Job migrates; the gateway and beat Deployments run 2 replicas, workers at least 2."""
    where, job, _spec, _container = k8s_one("migrate")
    assert job["kind"] == "Job", f"{where}: migrate should be a Job"
    for role, exactly in (("gateway", True), ("worker", False), ("beat", True)):
        where, doc, _spec, _container = k8s_one(role)
        assert doc["kind"] == "Deployment", f"{where}: {role} should be a Deployment"
        replicas = doc["spec"].get("replicas", 1)
        assert replicas == 2 if exactly else replicas >= 2, f"{where}: replicas {replicas}"


def test_k8s_containers_run_as_non_root() -> None:
    """runAsNonRoot (pod or container), never uid 0, no privilege escalation."""
    for where, _doc, spec, container in k8s_containers():
        pod = spec.get("securityContext", {})
        own = container.get("securityContext", {})
        effective = {**pod, **own}
        assert effective.get("runAsNonRoot") is True, f"{where}: runAsNonRoot is not true"
        assert effective.get("runAsUser", 1) != 0, f"{where}: runAsUser 0"
        assert own.get("allowPrivilegeEscalation") is False, (
            f"{where}: allowPrivilegeEscalation must be false"
        )
        assert "ALL" in own.get("capabilities", {}).get("drop", []), (
            f"{where}: capabilities must drop ALL"
        )


@pytest.mark.usefixtures("clean_environ")
def test_k8s_configmap_and_secret_keys_are_real_settings() -> None:
    """ConfigMap and Secret keys are settings; ConfigMap values are valid and hold no secret;
    the Secret template holds placeholders only."""
    for where, doc in k8s_kind("ConfigMap"):
        data = {k: str(v) for k, v in (doc.get("data") or {}).items()}
        assert unknown_settings(data) == [], f"{where}: unknown settings {unknown_settings(data)}"
        assert not set(data) & SECRET_SETTINGS, (
            f"{where}: secrets belong in the Secret: {sorted(set(data) & SECRET_SETTINGS)}"
        )
        assert settings_problem(data) is None, f"{where}: {settings_problem(data)}"
    secrets = k8s_kind("Secret")
    assert secrets, "deploy/k8s: no Secret template"
    for where, doc in secrets:
        data = {**(doc.get("data") or {}), **(doc.get("stringData") or {})}
        assert unknown_settings(data) == [], f"{where}: unknown settings {unknown_settings(data)}"
        for key, value in (doc.get("stringData") or {}).items():
            assert "REPLACE_ME" in str(value), f"{where}: {key} is not a placeholder"
    for where, _doc, _spec, container in k8s_containers():
        names = [item["name"] for item in container.get("env", [])]
        assert unknown_settings(names) == [], f"{where}: unknown settings {unknown_settings(names)}"


def test_k8s_gateway_probes_and_grace_exceed_the_drain() -> None:
    """Readiness on /readyz, liveness on /healthz, and terminationGracePeriodSeconds above
    CHATGATE_DRAIN_SECONDS plus the preStop pause."""
    where, _doc, spec, container = k8s_one("gateway")
    readiness = container.get("readinessProbe", {}).get("httpGet", {}).get("path")
    liveness = container.get("livenessProbe", {}).get("httpGet", {}).get("path")
    assert readiness == "/readyz", f"{where}: readinessProbe path {readiness!r}, expected /readyz"
    assert liveness == "/healthz", f"{where}: livenessProbe path {liveness!r}, expected /healthz"
    drain = float(container_settings(container).get("CHATGATE_DRAIN_SECONDS", DEFAULT_DRAIN))
    pre_stop = container.get("lifecycle", {}).get("preStop", {})
    pause = 0.0
    if pre_stop.get("exec", {}).get("command", [])[:1] == ["sleep"]:
        pause = float(pre_stop["exec"]["command"][1])
    elif "sleep" in pre_stop:
        pause = float(pre_stop["sleep"]["seconds"])
    grace = spec.get("terminationGracePeriodSeconds", 30)
    assert grace > drain + pause, (
        f"{where}: terminationGracePeriodSeconds {grace} must exceed CHATGATE_DRAIN_SECONDS "
        f"{drain} plus the preStop pause {pause}"
    )
    assert container.get("resources", {}).get("requests"), f"{where}: no resource requests"


def test_k8s_worker_autoscaler_targets_the_worker_deployment() -> None:
    """An autoscaling/v2 HPA on CPU scales the worker Deployment."""
    where, worker, _spec, container = k8s_one("worker")
    hpas = k8s_kind("HorizontalPodAutoscaler")
    assert hpas, "deploy/k8s: no HorizontalPodAutoscaler"
    for hpa_where, hpa in hpas:
        assert hpa["apiVersion"] == "autoscaling/v2", f"{hpa_where}: {hpa['apiVersion']}"
        target = hpa["spec"]["scaleTargetRef"]
        assert (target["kind"], target["name"]) == ("Deployment", worker["metadata"]["name"]), (
            f"{hpa_where}: scales {target}, not the worker Deployment"
        )
        metrics = [m["resource"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Resource"]
        assert "cpu" in metrics, f"{hpa_where}: no CPU metric"
    assert container.get("resources", {}).get("requests", {}).get("cpu"), (
        f"{where}: a CPU request is what the autoscaler measures against"
    )


# ---- systemd ---------------------------------------------------------------------------


def unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(path.read_text(), source=str(path))
    except configparser.Error as exc:
        pytest.fail(f"systemd/{path.name} does not parse: {exc}")
    return parser


def exec_argv(path: Path, parser: configparser.ConfigParser) -> list[str]:
    """ExecStart's words after the chatgate executable."""
    line = parser.get("Service", "ExecStart", fallback="")
    words = shlex.split(line.lstrip("-@:+!"))
    assert Path(words[0] if words else "").name == "chatgate", (
        f"systemd/{path.name}: ExecStart={line} does not run chatgate"
    )
    return words[1:]


def systemd_env() -> dict[str, str]:
    return env_file(SYSTEMD_ENV)[0]


def test_systemd_has_the_role_units() -> None:
    """chatgate run, and the gateway, worker and beat roles."""
    roles = {exec_argv(path, unit(path))[0] for path in UNIT_FILES}
    assert {"run", "gateway", "worker", "beat"} <= roles, f"deploy/systemd: roles {roles}"


@pytest.mark.parametrize("path", UNIT_FILES, ids=lambda p: p.name)
def test_systemd_unit_runs_a_real_command_hardened(path: Path) -> None:
    """Parses; ExecStart is a real subcommand; a dedicated user, the env file, the hardening;
    long-running units restart on failure and get longer than the drain to stop."""
    parser = unit(path)
    where = f"systemd/{path.name}"
    assert parser.has_section("Service"), f"{where}: no [Service]"
    argv = exec_argv(path, parser)
    assert cli_problem(argv) is None, f"{where}: ExecStart chatgate {argv}: {cli_problem(argv)}"
    service = parser["Service"]
    assert service.get("User") not in (None, "root", "0"), f"{where}: User={service.get('User')}"
    assert service.get("EnvironmentFile", "").lstrip("-") == "/etc/chatgate/env", (
        f"{where}: EnvironmentFile={service.get('EnvironmentFile')}"
    )
    state_dir = systemd_env().get("CHATGATE_STATE_DIR", "/var/lib/chatgate")
    expected = {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "PrivateTmp": "yes",
    }
    for key, value in expected.items():
        assert service.get(key) == value, f"{where}: {key}={service.get(key)}, expected {value}"
    assert state_dir in service.get("ReadWritePaths", "").split(), (
        f"{where}: ReadWritePaths must include the state directory {state_dir}"
    )
    if service.get("Type") == "oneshot":
        return
    assert service.get("Restart") == "on-failure", f"{where}: Restart={service.get('Restart')}"
    assert service.get("KillSignal") == "SIGTERM", (
        f"{where}: KillSignal={service.get('KillSignal')}"
    )
    drain = float(systemd_env().get("CHATGATE_DRAIN_SECONDS", DEFAULT_DRAIN))
    stop = seconds(service.get("TimeoutStopSec", "90"))
    assert stop > drain, (
        f"{where}: TimeoutStopSec={stop:g}s must exceed CHATGATE_DRAIN_SECONDS {drain:g}s"
    )


@pytest.mark.usefixtures("clean_environ")
def test_systemd_env_file_example_names_real_settings() -> None:
    """deploy/systemd/chatgate.env.example sets (or shows) settings only, with valid values."""
    values, mentioned = env_file(SYSTEMD_ENV)
    assert unknown_settings(mentioned) == [], (
        f"systemd/{SYSTEMD_ENV.name}: unknown settings {unknown_settings(mentioned)}"
    )
    assert settings_problem(values) is None, (
        f"systemd/{SYSTEMD_ENV.name}: {settings_problem(values)}"
    )

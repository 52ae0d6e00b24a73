"""The bootstrap of the worker processes (Celery worker, beat), and the agent core every
process builds the same way.

``build_core`` picks the concrete model, tools, permissions and runners from the settings;
the gateway (``gateway.app``) and the Celery worker processes (``WorkerRuntime``) both use
it, so a scheduled turn on a worker runs exactly like an interactive one on a gateway.

A Celery worker process runs its async code on one event loop that lives as long as the
process, on its own thread (ARCHITECTURE.md: never ``asyncio.run`` per task with cached
clients); tasks hand it coroutines with ``run_coroutine_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import threading
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import structlog

from adapters.registry import build_adapters
from agent_core.access import AccessPolicy, Membership, with_operator
from agent_core.budgets import BudgetLimits
from agent_core.delivery import Outbound, OutboundRouter
from agent_core.events import Platform
from agent_core.faults import FaultPoints
from agent_core.files.bucket import store_for
from agent_core.files.fetching import FileLimits, FileSource, TurnFiles
from agent_core.jobs import JobPolicy, JobRunner
from agent_core.loop import TurnRunner
from agent_core.memory_upkeep import MemoryUpkeep
from agent_core.model import Model
from agent_core.permissions import Permissions
from agent_core.process_identity import process_owner, take_over_leases
from agent_core.profiles import Profiles
from agent_core.questions import ask_user_factory
from agent_core.records import LATE_AFTER
from agent_core.sandbox.base import FILES_INSIDE, SandboxLimits, make_inbox
from agent_core.sandbox.choose import SandboxChoice, SandboxConfig, choose_sandbox
from agent_core.scheduling.service import ScheduleLimits, Schedules
from agent_core.secrets import Secrets
from agent_core.settings import Settings
from agent_core.storage.database import Database, sqlite_path
from agent_core.storage.store import Store
from agent_core.tool_steps import ToolRound
from agent_core.tools.http_request import http_request_factory
from agent_core.tools.mcp_tools import McpServers
from agent_core.tools.memory_tools import memory_tools_factory
from agent_core.tools.registry import ToolRegistry
from agent_core.tools.run_command import run_command_factory
from agent_core.tools.schedule_tools import schedule_tools_factory
from agent_core.tools.send_file import send_file_factory
from workers.dispatcher import ScheduleDispatcher
from workers.models import ProfileModels, build_model, close_models

if TYPE_CHECKING:
    from workers.celery_app import CeleryJobQueue

log = structlog.get_logger("chatgate.worker")
T = TypeVar("T")


def load_secrets(settings: Settings, environ: Mapping[str, str] | None = None) -> Secrets:
    """Read each ``[secrets]`` variable once, with the hosts it is bound to; a missing one
    is logged (doctor reports it)."""
    environ = os.environ if environ is None else environ
    values: dict[str, str] = {}
    hosts: dict[str, list[str]] = {}
    for name, setting in settings.secrets.items():
        value = environ.get(setting.env, "")
        if not value:
            log.warning("secret not set", secret=name, variable=setting.env)
        values[name] = value
        if setting.hosts is not None:
            hosts[name] = setting.hosts
    return Secrets(values, hosts=hosts)


def credentials(settings: Settings, environ: Mapping[str, str] | None = None) -> Secrets:
    """Every credential chatgate holds (the ``[secrets]``, platform tokens, the model key,
    the web token, database and Redis passwords), for scrubbing logs."""
    environ = os.environ if environ is None else environ
    values = {name: environ.get(s.env, "") for name, s in settings.secrets.items()}
    for field in (
        "slack_bot_token",
        "slack_signing_secret",
        "slack_app_token",
        "telegram_bot_token",
        "telegram_webhook_secret",
        "discord_bot_token",
        "model_api_key",
        "web_token",
        "metrics_token",
    ):
        value = getattr(settings, field)
        if value is not None:
            name = field.upper()
            while name in values:  # a [secrets] entry of the same name keeps its own
                name += "_"
            values[name] = value.get_secret_value()
    for name, url in (("DATABASE_PASSWORD", settings.database_url), ("REDIS", settings.redis_url)):
        password = urlsplit(url).password if url else None
        if password:
            values[name] = password
    return Secrets(values)


def build_profiles(settings: Settings) -> Profiles:
    """The ``[[profile]]`` tables, over the settings they fall back on."""
    return Profiles(
        settings.profile,
        model=settings.model,
        api_base=settings.model_api_base,
        fallbacks=settings.fallback_models,
        system_prompt=settings.system_prompt,
        budgets=budget_limits(settings),
        busy_mode=settings.busy_mode,
        policy=settings.policy,
    )


def build_schedules(settings: Settings, store: Store) -> Schedules:
    """Schedules with the configured limits."""
    return Schedules(
        store,
        limits=ScheduleLimits(
            timezone=settings.timezone,
            min_interval=timedelta(seconds=settings.schedule_min_seconds),
            grace=timedelta(seconds=settings.schedule_grace_seconds),
            catch_up_max=settings.schedule_catch_up_max,
            per_conversation=settings.schedules_per_conversation,
        ),
        admins=with_operator(settings.admins),
    )


def sandbox_config(settings: Settings) -> SandboxConfig:
    """Where and how ``run_command`` may run, from ``CHATGATE_SANDBOX`` and
    ``[tools.run_command]``; chatgate's own files are named so no backend shows them."""
    hidden = [settings.state_dir]
    if settings.config is not None:
        hidden.append(settings.config)
    database = sqlite_path(settings.database_url)
    if database is not None:
        hidden += [database, database.with_name(f"{database.name}-wal")]
        hidden.append(database.with_name(f"{database.name}-shm"))
    options = settings.tools.run_command
    return SandboxConfig(
        mode=settings.sandbox,
        state_dir=settings.state_dir.resolve(),
        network=options.network,
        bwrap=options.bwrap,
        container_engine=options.container_engine,
        image=options.image,
        hidden=tuple(hidden),
        environ=dict(os.environ),
    )


def sandbox_limits(settings: Settings) -> SandboxLimits:
    """One command's limits (``[tools.run_command]``)."""
    options = settings.tools.run_command
    return SandboxLimits(
        timeout=options.timeout,
        cpu_seconds=options.cpu_seconds,
        memory_mb=options.memory_mb,
        processes=options.processes,
        file_size_mb=options.file_size_mb,
        tmp_mb=options.tmp_mb,
        output_limit=options.output_limit,
    )


async def prepare_sandbox(settings: Settings) -> SandboxChoice:
    """Probe the sandbox once and say at start what ``run_command`` will run in."""
    choice = await choose_sandbox(sandbox_config(settings))
    sandbox = choice.sandbox
    if sandbox is None:
        report = log.error if settings.sandbox != "auto" else log.warning
        report(
            "run_command is not offered: no working sandbox",
            sandbox=settings.sandbox,
            tried=choice.reasons(),
            fix=choice.fix(),
        )
    elif sandbox.name == "none":
        log.warning(
            "run_command runs WITHOUT a sandbox (CHATGATE_SANDBOX=none): a command can read "
            "and change what chatgate's user can, and reach the network and chatgate's own "
            "API; use CHATGATE_SANDBOX=auto"
        )
    else:
        log.info("sandbox ready", backend=sandbox.name, network=sandbox.network)
        if sandbox.network == "full":
            log.warning(
                'run_command may reach the network ([tools.run_command] network = "full"), '
                "chatgate's own API on this host included"
            )
    return choice


def build_tools(
    settings: Settings,
    secrets: Secrets,
    schedules: Schedules,
    store: Store,
    mcp: McpServers,
    sandbox: SandboxChoice | None,
    outbound: Outbound,
) -> ToolRegistry:
    """The built-in tools, configured from ``[tools.*]``, and the MCP servers' tools;
    ``run_command`` only with a working sandbox."""
    http = settings.tools.http_request
    factories = [
        ask_user_factory(),
        schedule_tools_factory(schedules),
        memory_tools_factory(store, admins=settings.admins),
        mcp.factory(),
        http_request_factory(
            allowed_hosts=http.allowed_hosts,
            secrets=secrets,
            timeout=http.timeout,
            output_limit=http.output_limit,
        ),
    ]
    if sandbox is not None and sandbox.sandbox is not None:
        state_dir = settings.state_dir.resolve()
        limits = sandbox_limits(settings)
        factories.insert(4, run_command_factory(state_dir, sandbox.sandbox, limits))
        megabyte = 1024 * 1024
        factories.insert(
            5,
            send_file_factory(
                state_dir, outbound, store, limit=int(settings.file_max_mb * megabyte)
            ),
        )
    return ToolRegistry(factories)


def build_files(
    settings: Settings,
    store: Store,
    sources: Mapping[Platform, FileSource],
    sandbox: SandboxChoice | None,
    faults: FaultPoints | None = None,
) -> TurnFiles:
    """A turn's files: fetched from ``sources`` into the state directory, within the
    caps, and put where ``run_command``'s sandbox sees them (when there is one)."""
    state_dir = settings.state_dir.resolve()
    backend = sandbox.sandbox if sandbox is not None else None
    megabyte = 1024 * 1024
    transcriber = None
    if settings.transcribe_model:
        from agent_core.model_litellm import same_provider
        from agent_core.transcribe_litellm import LiteLLMTranscriber

        shared = same_provider(settings.transcribe_model, settings.model or "")
        key = settings.model_api_key.get_secret_value() if settings.model_api_key else None
        transcriber = LiteLLMTranscriber(
            settings.transcribe_model,
            api_base=settings.model_api_base if shared else None,
            api_key=key if shared else None,
            timeout=settings.model_timeout,
        )
    return TurnFiles(
        store,
        store_for(settings),
        sources,
        limits=FileLimits(
            per_file=int(settings.file_max_mb * megabyte),
            per_turn=int(settings.message_files_max_mb * megabyte),
        ),
        inbox=functools.partial(make_inbox, state_dir) if backend else None,
        inside=FILES_INSIDE if backend is not None and backend.name != "none" else None,
        faults=faults,
        transcriber=transcriber,
    )


@dataclass(kw_only=True)
class Core:
    """The agent core of one process."""

    store: Store
    model: Model | None
    # The model for summaries, extraction and the memory review (may be ``model``).
    summarizer: Model | None
    outbound: Outbound
    runner: TurnRunner
    schedules: Schedules
    jobs: JobRunner
    faults: FaultPoints
    # MCP servers' tools: connect with ``await mcp.start()`` before serving, and close.
    mcp: McpServers
    # The models profiles name (closed with the process's own).
    profile_models: ProfileModels


def build_core(
    settings: Settings,
    store: Store,
    *,
    outbound: Outbound,
    model: Model | None,
    sandbox: SandboxChoice | None,
    files: Mapping[Platform, FileSource] | None = None,
    observer: Any = None,
    faults: FaultPoints | None = None,
) -> Core:
    """The turn runner, its tools and the job runner, from the settings (``sandbox``:
    what :func:`prepare_sandbox` found; None offers no ``run_command``; ``faults``: the
    process's, when something else hits them too)."""
    faults = faults if faults is not None else FaultPoints(settings.test_fault)
    if settings.test_fault:
        log.warning(
            "TEST FAULT POINTS ARE SET: this process kills itself at these steps; "
            "unset CHATGATE_TEST_FAULT unless this is a crash test",
            points=settings.test_fault,
        )
    summarizer = build_model(settings, settings.summary_model) if settings.summary_model else model
    profile_models = ProfileModels(settings, model)
    secrets = load_secrets(settings)
    mcp = McpServers(settings.mcp.servers)
    schedules = build_schedules(settings, store)
    membership = Membership(access_policy(settings), store.is_paired, store.trigger_exists)
    tool_round = ToolRound(
        store,
        outbound=outbound,
        permissions=Permissions(settings.policy),
        secrets=secrets,
        approval_ttl=timedelta(minutes=settings.approval_minutes),
        faults=faults,
        observer=observer,
    )
    runner = TurnRunner(
        store,
        model=model,
        outbound=outbound,
        system_prompt=settings.system_prompt,
        reply_max_tokens=settings.reply_max_tokens,
        max_steps=settings.max_steps,
        tools=build_tools(settings, secrets, schedules, store, mcp, sandbox, outbound),
        tool_round=tool_round,
        faults=faults,
        observer=observer,
        budgets=budget_limits(settings),
        tools_offered=settings.tools_offered,
        summarizer=summarizer,
        extract_memories=settings.memory_extract,
        may_talk=membership.may_talk,
        stream_replies=settings.stream_replies,
        busy_mode=settings.busy_mode,
        collect_seconds=settings.collect_seconds,
        show_marks=settings.status_marks,
        files=build_files(settings, store, files, sandbox, faults) if files is not None else None,
        profiles=build_profiles(settings) if settings.profile else None,
        models=profile_models,
    )
    jobs = JobRunner(
        store,
        runner,
        outbound,
        policy=JobPolicy(
            lease_seconds=settings.lease_seconds,
            max_attempts=settings.job_attempts,
            backoff_seconds=settings.job_backoff_seconds,
            failure_limit=settings.schedule_failure_limit,
            # A run past its grace was missed: it says so however short the grace is.
            late_after=min(LATE_AFTER, timedelta(seconds=settings.schedule_grace_seconds)),
        ),
        upkeep=MemoryUpkeep(store, summarizer),
        may_talk=membership.may_talk,
        faults=faults,
    )
    return Core(
        store=store,
        model=model,
        summarizer=summarizer,
        profile_models=profile_models,
        outbound=outbound,
        runner=runner,
        schedules=schedules,
        jobs=jobs,
        faults=faults,
        mcp=mcp,
    )


def access_policy(settings: Settings) -> AccessPolicy:
    """Who may talk to the agent (``CHATGATE_ACCESS``, ``_ALLOW``, ``_ADMINS``)."""
    return AccessPolicy(
        mode=settings.access, allow=settings.allow, admins=with_operator(settings.admins)
    )


def maintenance_cron(settings: Settings) -> str | None:
    """When the memory review runs (None: never)."""
    return None if settings.memory_maintenance == "off" else settings.memory_maintenance


def budget_limits(settings: Settings) -> BudgetLimits:
    """The budgets the settings set (``CHATGATE_BUDGET_*``)."""
    return BudgetLimits(
        turn_tokens=settings.budget_turn_tokens,
        conversation_tokens=settings.budget_conversation_tokens,
        conversation_usd=settings.budget_conversation_usd,
        user_daily_tokens=settings.budget_user_daily_tokens,
        user_daily_usd=settings.budget_user_daily_usd,
        daily_usd=settings.budget_daily_usd,
        warn_at=settings.budget_warn_at,
    )


class WorkerRuntime:
    """One per Celery worker process: a long-lived event loop on a thread and the core."""

    def __init__(self, settings: Settings, *, warm: bool = False) -> None:
        self.settings = settings
        self._warm = warm
        self.owner = process_owner()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="chatgate-loop", daemon=True
        )
        self._database: Database | None = None
        self._adapters = contextlib.AsyncExitStack()
        self.core: Core | None = None
        self.dispatcher: ScheduleDispatcher | None = None

    def start(self) -> None:
        """Start the loop and open the database (migrating it); with ``warm``, also build
        the model's client now rather than inside the first job."""
        self._thread.start()
        self.call(self._open(), timeout=120)

    async def _open(self) -> None:
        database = Database(self.settings.database_url)
        await database.migrate()
        self._database = database
        store = Store(database)
        await take_over_leases(store)
        # Workers only send: each configured platform's sender, no inbound side.
        senders = {
            platform: (await self._adapters.enter_async_context(adapter)).sender
            for platform, adapter in build_adapters(self.settings).items()
        }
        outbound = OutboundRouter(senders)
        self.core = build_core(
            self.settings,
            store,
            outbound=outbound,
            files=senders,
            model=build_model(self.settings),
            sandbox=await prepare_sandbox(self.settings),
        )
        await self.core.mcp.start()
        if self._warm:
            for model in (self.core.model, self.core.summarizer):
                if model is not None:
                    try:
                        await model.warm_up()
                    except Exception:  # the first call tries again, and reports it
                        log.exception("building the model client failed", model=model.name)

    def attach_dispatcher(self, queue: CeleryJobQueue) -> None:
        """Let this process tick the schedule dispatcher, submitting to ``queue``."""
        assert self.core is not None
        self.dispatcher = ScheduleDispatcher(
            self.core.store,
            self.core.schedules,
            queue,
            # Long enough that a job waiting in a busy broker is not sent twice.
            resend_after=timedelta(seconds=2 * self.settings.job_time_limit_seconds),
            backlog=queue.waiting,
            maintenance=maintenance_cron(self.settings),
            faults=self.core.faults,
            owner=self.owner,
        )

    def call(self, coroutine: Coroutine[Any, Any, T], *, timeout: float) -> T:
        """Run a coroutine on the process's loop and wait for its result."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        """Close the platform clients and the database, and stop the loop."""
        if self.core is not None:
            try:
                self.call(self.core.mcp.close(), timeout=15)
            except Exception:
                log.exception("closing the MCP servers failed")
        try:
            self.call(self._adapters.aclose(), timeout=10)
        except Exception:
            log.exception("closing the platform clients failed")
        if self.core is not None:
            try:
                self.call(
                    close_models(
                        self.core.model, self.core.summarizer, *self.core.profile_models.built()
                    ),
                    timeout=10,
                )
            except Exception:
                log.exception("closing the model clients failed")
        if self._database is not None:
            database = self._database
            self._database = None
            try:
                self.call(database.dispose(), timeout=10)
            except Exception:
                log.exception("closing the database failed")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

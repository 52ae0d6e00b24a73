"""The gateway's wiring point: the one place that reads settings and picks concrete classes."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import structlog
from aiohttp import web

from adapters.web import WebHub, WebSender
from agent_core.access import AccessPolicy
from agent_core.approvals import Approvals
from agent_core.delivery import OutboundRouter
from agent_core.faults import FaultPoints
from agent_core.gatekeeper import Gatekeeper
from agent_core.loop import TurnRunner
from agent_core.model import Model
from agent_core.permissions import Permissions
from agent_core.ratelimit import RateLimiter
from agent_core.secrets import Secrets
from agent_core.settings import Settings
from agent_core.storage.database import open_database
from agent_core.storage.store import Store
from agent_core.tool_steps import ToolRound
from agent_core.tools.http_request import http_request_factory
from agent_core.tools.registry import ToolRegistry
from agent_core.tools.run_command import SandboxLimits, run_command_factory
from gateway import routes
from gateway.dispatch import Dispatcher
from gateway.metrics import Metrics
from gateway.runtime import RUNTIME, Runtime
from gateway.supervisor import Supervisor
from gateway.web import api

log = structlog.get_logger("chatgate.gateway")


def configure_logging(settings: Settings) -> None:
    """Structured logs to stderr, as key=value lines or JSON."""
    level = getattr(logging, settings.log_level.upper())
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if settings.log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=max(level, logging.WARNING), stream=sys.stderr)


def build_model(settings: Settings) -> Model | None:
    """The configured model, or None when ``CHATGATE_MODEL`` is unset."""
    if not settings.model:
        return None
    from agent_core.model_litellm import LiteLLMModel

    return LiteLLMModel(
        settings.model,
        api_base=settings.model_api_base,
        api_key=settings.model_api_key.get_secret_value() if settings.model_api_key else None,
        fallbacks=settings.fallback_models,
        timeout=settings.model_timeout,
        retries=settings.model_retries,
        context_tokens=settings.model_context_tokens,
    )


def load_secrets(settings: Settings) -> Secrets:
    """Read each ``[secrets]`` variable once; a missing one is logged (doctor reports it)."""
    values: dict[str, str] = {}
    for name, variable in settings.secrets.items():
        value = os.environ.get(variable, "")
        if not value:
            log.warning("secret not set", secret=name, variable=variable)
        values[name] = value
    return Secrets(values)


def build_tools(settings: Settings, secrets: Secrets) -> ToolRegistry:
    """The built-in tools, configured from ``[tools.*]``."""
    http = settings.tools.http_request
    return ToolRegistry(
        [
            run_command_factory(
                settings.state_dir.resolve(),
                SandboxLimits(**settings.tools.run_command.model_dump()),
            ),
            http_request_factory(
                allowed_hosts=http.allowed_hosts,
                secrets=secrets,
                timeout=http.timeout,
                output_limit=http.output_limit,
            ),
        ]
    )


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


async def _sweep(runtime: Runtime, interval: float) -> None:
    """Find conversations with open turns and no live lease (after a crash, a lost lease,
    or a drain) and run them, and expire overdue approvals; the first pass is start-up
    recovery. Safe on every process at once: leases and compare-and-set decide."""
    while not runtime.stopping.is_set():
        try:
            await runtime.dispatcher.expire_approvals()
            found = await runtime.store.conversations_needing_work()
            if found:
                log.debug("sweep found work", conversations=len(found))
            for conversation_id in found:
                runtime.supervisor.submit(conversation_id)
        except Exception:
            log.exception("sweep failed")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval):
                await runtime.stopping.wait()


async def _warm_up(model: Model) -> None:
    """Import the model library off the request path, so the first reply is not slow."""
    try:
        await model.warm_up()
    except Exception:
        log.exception("model warm-up failed; the first call will try again")


def build_app(settings: Settings, *, model: Model | None = None) -> web.Application:
    """The aiohttp application with every route and the runtime's lifecycle attached."""
    app = web.Application(
        client_max_size=routes.MAX_BODY,
        middlewares=[routes.errors_middleware, api.access_middleware],
    )
    routes.add_routes(app)
    api.add_routes(app)
    chosen = model if model is not None else build_model(settings)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        async with open_database(settings.database_url) as database:
            store = Store(database)
            metrics = Metrics()
            hub = WebHub()
            faults = FaultPoints(settings.test_fault)
            outbound = OutboundRouter({"web": WebSender(hub)})
            secrets = load_secrets(settings)
            tool_round = ToolRound(
                store,
                outbound=outbound,
                permissions=Permissions(settings.policy),
                secrets=secrets,
                approval_ttl=timedelta(minutes=settings.approval_minutes),
                faults=faults,
                observer=metrics,
            )
            runner = TurnRunner(
                store,
                model=chosen,
                outbound=outbound,
                system_prompt=settings.system_prompt,
                reply_max_tokens=settings.reply_max_tokens,
                max_steps=settings.max_steps,
                tools=build_tools(settings, secrets),
                tool_round=tool_round,
                faults=faults,
                observer=metrics,
            )
            gate = Gatekeeper(
                store,
                outbound,
                policy=AccessPolicy(
                    mode=settings.access, allow=settings.allow, admins=settings.admins
                ),
                users=RateLimiter(burst=settings.rate_burst, per_minute=settings.rate_per_minute),
                conversations=RateLimiter(
                    burst=3 * settings.rate_burst, per_minute=3 * settings.rate_per_minute
                ),
                pairing_ttl=timedelta(minutes=settings.pairing_minutes),
                max_pending=settings.pairing_max_pending,
            )
            approvals = Approvals(store, outbound, admins=settings.admins, is_member=gate.is_member)
            owner = _owner()

            async def work(conversation_id: str) -> int:
                return await runner.run_conversation(
                    conversation_id, owner=owner, lease=settings.lease_seconds
                )

            supervisor = Supervisor(work, max_concurrent=settings.max_concurrent_turns)
            runtime = Runtime(
                settings=settings,
                owner=owner,
                store=store,
                metrics=metrics,
                hub=hub,
                runner=runner,
                supervisor=supervisor,
                dispatcher=Dispatcher(
                    store,
                    supervisor,
                    approvals=approvals,
                    gate=gate,
                    metrics=metrics,
                    hub=hub,
                    faults=faults,
                ),
            )
            app[RUNTIME] = runtime
            sweeper = asyncio.create_task(
                _sweep(runtime, interval=min(settings.lease_seconds / 2, 5.0)), name="sweeper"
            )
            warming = (
                asyncio.create_task(_warm_up(chosen), name="model-warm-up") if chosen else None
            )
            try:
                yield
            finally:
                runtime.stopping.set()
                cancelled = await supervisor.drain(settings.drain_seconds)
                log.info("drained", cancelled_lanes=cancelled)
                for task in (sweeper, warming):
                    if task is not None:
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError, Exception):
                            await task

    async def on_shutdown(app: web.Application) -> None:
        # Long-lived streams end so the drain can begin.
        app[RUNTIME].stopping.set()

    app.cleanup_ctx.append(lifecycle)
    app.on_shutdown.append(on_shutdown)
    return app


def _harden_process() -> None:
    """Files we create are private, and same-user processes (the sandboxed commands when
    chatgate does not run as root) cannot read /proc/<us>/environ or our memory."""
    os.umask(0o077)
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_dumpable = 4
        libc.prctl(pr_set_dumpable, 0, 0, 0, 0)


async def serve(settings: Settings) -> None:
    """Run the gateway until SIGTERM or SIGINT, then drain and exit."""
    _harden_process()
    app = build_app(settings)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port, reuse_address=True)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    log.info("chatgate ready", url=site.name, model=settings.model)
    await stop.wait()
    log.info("stopping: draining in-flight turns", drain_seconds=settings.drain_seconds)
    await runner.cleanup()
    log.info("stopped")

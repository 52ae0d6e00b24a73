"""The gateway's wiring point: the one place that reads settings and picks concrete classes."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import sys
from collections.abc import AsyncIterator
from datetime import timedelta

import structlog
from aiohttp import web

from adapters.http import MAX_BODY
from adapters.registry import AdapterFactory, build_adapters
from adapters.web.send import WebHub
from adapters.web.uploads import Uploads
from agent_core.access import with_operator
from agent_core.approvals import Approvals
from agent_core.delivery import OutboundRouter
from agent_core.faults import FaultPoints
from agent_core.feedback import Feedback
from agent_core.files.bucket import BucketBlobs, store_for
from agent_core.files.retention import FileRetention
from agent_core.gatekeeper import Gatekeeper
from agent_core.jobs import JobQueue
from agent_core.model import Model
from agent_core.process_identity import process_owner, take_over_leases
from agent_core.ratelimit import Limiter, local_limiters
from agent_core.revocation import Revocations
from agent_core.secrets import LogScrubber
from agent_core.settings import Settings
from agent_core.storage.database import open_database
from agent_core.storage.operations import Operations
from agent_core.storage.store import Store
from agent_core.triggers import Triggers
from gateway import console, routes, trigger_routes, upkeep
from gateway.children import Child
from gateway.commands import ChatCommands
from gateway.inbound import Inbound, submit_or_later
from gateway.metrics import Metrics
from gateway.platforms import Platforms, gateway_hooks
from gateway.runtime import RUNTIME, Runtime
from gateway.supervisor import Supervisor
from gateway.web import api
from gateway.web import feedback as web_feedback
from workers.bootstrap import (
    access_policy,
    budget_limits,
    build_core,
    build_profiles,
    credentials,
    maintenance_cron,
    prepare_sandbox,
)
from workers.dispatcher import ScheduleDispatcher
from workers.local_runner import InteractiveFirst, LocalRunner, tick_forever
from workers.models import build_model, close_models

log = structlog.get_logger("chatgate.gateway")


def configure_logging(settings: Settings) -> None:
    """Structured logs to stderr, as key=value lines or JSON, with every credential
    chatgate holds scrubbed from each line (exception text included), ours and the
    libraries' alike."""
    level = getattr(logging, settings.log_level.upper())
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if settings.log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    scrubber = LogScrubber(credentials(settings))
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            scrubber,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=max(level, logging.WARNING), stream=sys.stderr)
    for handler in logging.getLogger().handlers:
        handler.addFilter(scrubber.filter)


async def _sweep(runtime: Runtime, interval: float) -> None:
    """Find conversations with open turns and no live lease (after a crash, a lost lease,
    or a drain) and run them, and expire overdue approvals; the first pass is start-up
    recovery. Safe on every process at once: leases and compare-and-set decide."""
    while not runtime.stopping.is_set():
        try:
            await runtime.inbound.expire_approvals()
            await runtime.inbound.enforce_access()
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


async def _retain_files(runtime: Runtime, every: float = 3600.0) -> None:
    """Remove files past ``CHATGATE_FILE_RETENTION_DAYS`` (at start, then every hour)."""
    state = runtime.settings.state_dir.resolve()
    retention = FileRetention(
        runtime.store, state, days=runtime.settings.file_retention_days, blobs=runtime.files
    )
    while not runtime.stopping.is_set():
        try:
            await retention.sweep()
        except Exception:
            log.exception("removing old files failed")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(every):
                await runtime.stopping.wait()


async def _warm_up(model: Model) -> None:
    """Import the model library off the request path, so the first reply is not slow."""
    try:
        await model.warm_up()
    except Exception:
        log.exception("model warm-up failed; the first call will try again")


def build_app(
    settings: Settings,
    *,
    model: Model | None = None,
    adapters: AdapterFactory = build_adapters,
) -> web.Application:
    """The aiohttp application with every route and the runtime's lifecycle attached
    (``adapters``: the registry, or a test's stand-in)."""
    app = web.Application(
        client_max_size=MAX_BODY,
        middlewares=[api.headers_middleware, routes.errors_middleware, api.access_middleware],
    )
    routes.add_routes(app)
    api.add_routes(app)
    web_feedback.add_routes(app)
    console.add_routes(app)
    trigger_routes.add_routes(app)
    chosen = model if model is not None else build_model(settings)
    faults = FaultPoints(settings.test_fault)
    hub = WebHub()
    platforms = Platforms(app, adapters(settings, hooks=gateway_hooks(app, faults), hub=hub))

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        async with open_database(settings.database_url) as database:
            store = Store(database)
            # A gateway restarted after a kill on this machine goes on with the turns it
            # left at once: the sweep below finds them free instead of waiting out a lease.
            await take_over_leases(store)
            metrics = Metrics()
            database.on_commit = metrics.committed
            stack = contextlib.AsyncExitStack()
            await platforms.open(stack)
            senders = {p: a.sender for p, a in platforms.adapters.items()}
            outbound = OutboundRouter(senders)
            core = build_core(
                settings,
                store,
                outbound=outbound,
                files=senders,
                model=chosen,
                sandbox=await prepare_sandbox(settings),
                observer=metrics,
                faults=faults,
            )
            await core.mcp.start()
            users: Limiter
            conversations: Limiter
            if settings.redis_url:
                # Several gateways: one sender's messages may land on any of them.
                from gateway.shared_limits import shared_limiters

                client, users, conversations = shared_limiters(settings)
                stack.push_async_callback(client.aclose)
            else:
                users, conversations = local_limiters(
                    burst=settings.rate_burst, per_minute=settings.rate_per_minute
                )
            gate = Gatekeeper(
                store,
                outbound,
                policy=access_policy(settings),
                users=users,
                conversations=conversations,
                pairing_ttl=timedelta(minutes=settings.pairing_minutes),
                max_pending=settings.pairing_max_pending,
            )
            approvals = Approvals(
                store,
                outbound,
                admins=with_operator(settings.admins),
                may_talk=gate.may_talk,
                faults=faults,
            )
            owner = process_owner()

            async def work(conversation_id: str) -> int:
                return await core.runner.run_conversation(
                    conversation_id, owner=owner, lease=settings.lease_seconds
                )

            supervisor = Supervisor(work, max_concurrent=settings.max_concurrent_turns)
            queue: JobQueue
            local: LocalRunner | None = None
            if settings.redis_url:
                from workers.celery_app import CeleryJobQueue, make_celery

                celery_queue = CeleryJobQueue(make_celery(settings), store)
                stack.callback(celery_queue.close)
                queue = celery_queue
            else:
                # No broker: this process runs queued work itself (safe in every gateway
                # at once: claims are compare-and-set), interactive turns first.
                priority = InteractiveFirst(lambda: supervisor.active)
                core.jobs.before_step = priority.wait
                local = LocalRunner(
                    core.jobs, owner=owner, concurrency=settings.job_concurrency, busy=priority.busy
                )
                queue = local
            profiles = build_profiles(settings)
            triggers = Triggers(
                store,
                functools.partial(submit_or_later, queue),
                max_bytes=settings.trigger_max_bytes,
                per_hour=settings.trigger_per_hour,
                admins=with_operator(settings.admins),
            )
            commands = ChatCommands(
                store,
                gate=gate,
                schedules=core.schedules,
                submit=functools.partial(submit_or_later, queue),
                budgets=budget_limits(settings),
                busy_mode=settings.busy_mode,
                profiles=profiles,
                triggers=triggers,
            )
            files = store_for(settings)
            bucket = files if isinstance(files, BucketBlobs) else None
            runtime = Runtime(
                settings=settings,
                owner=owner,
                store=store,
                metrics=metrics,
                hub=hub,
                runner=core.runner,
                supervisor=supervisor,
                schedules=core.schedules,
                inbound=Inbound(
                    store,
                    supervisor,
                    approvals=approvals,
                    gate=gate,
                    metrics=metrics,
                    hub=hub,
                    schedules=core.schedules,
                    jobs=queue,
                    commands=commands,
                    faults=core.faults,
                    revocations=Revocations(
                        store, outbound, approvals=approvals, may_talk=gate.may_talk
                    ),
                    stop_turn=core.runner.stop,
                    busy_mode=settings.busy_mode,
                    marks=outbound if settings.status_marks else None,
                    profiles=profiles,
                ),
                commands=commands,
                profiles=profiles,
                feedback=Feedback(
                    store,
                    outbound,
                    may_talk=gate.may_talk,
                    within_rate=gate.take_reaction,
                    shown=hub.publish,
                ),
                files=files,
                uploads=Uploads(settings.state_dir.resolve(), bucket),
                operations=Operations(database),
                triggers=triggers,
            )
            app[RUNTIME] = runtime
            platforms.start(runtime.stopping, report_every=settings.deaf_check_seconds)
            sweeper = asyncio.create_task(
                _sweep(runtime, interval=min(settings.lease_seconds / 2, 5.0)), name="sweeper"
            )
            await upkeep.record_start(runtime)
            background: list[asyncio.Task[None]] = [
                asyncio.create_task(_retain_files(runtime), name="file retention"),
                asyncio.create_task(upkeep.retain(runtime), name="retention"),
            ]
            if local is not None:
                ticker = ScheduleDispatcher(
                    store,
                    core.schedules,
                    local,
                    maintenance=maintenance_cron(settings),
                    faults=core.faults,
                    owner=runtime.owner,
                )
                background += [
                    asyncio.create_task(local.serve(runtime.stopping), name="job-runner"),
                    asyncio.create_task(
                        tick_forever(
                            ticker, every=settings.schedule_tick_seconds, stopping=runtime.stopping
                        ),
                        name="dispatcher",
                    ),
                ]
                runner_wake = local.wake

                def on_idle() -> None:
                    priority.idle()
                    runner_wake()

                supervisor.on_idle = on_idle
            warming = (
                asyncio.create_task(_warm_up(chosen), name="model-warm-up")
                if chosen is not None and settings.model_warm_up
                else None
            )
            try:
                yield
            finally:
                runtime.stopping.set()
                cancelled = await supervisor.drain(settings.drain_seconds)
                jobs_cancelled = await local.drain(settings.drain_seconds) if local else 0
                log.info("drained", cancelled_lanes=cancelled, cancelled_jobs=jobs_cancelled)
                await core.mcp.close()
                await stack.aclose()
                await close_models(core.model, core.summarizer, *core.profile_models.built())
                for task in (sweeper, warming, *background):
                    if task is not None:
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError, Exception):
                            await task

    async def on_shutdown(app: web.Application) -> None:
        # Long-lived streams end and the platforms stop receiving, so the drain can begin.
        app[RUNTIME].stopping.set()
        await platforms.stop()

    app.cleanup_ctx.append(lifecycle)
    app.on_shutdown.append(on_shutdown)
    return app


async def serve(settings: Settings, *, with_workers: bool = False) -> None:
    """Run the gateway until SIGTERM or SIGINT, then drain and exit.

    ``with_workers`` (``chatgate run`` with Redis): also run a Celery worker and a beat as
    child processes. Without Redis the gateway runs queued work itself."""
    app = build_app(settings)
    children = [Child("worker"), Child("beat")] if with_workers and settings.redis_url else []
    keepers = [asyncio.create_task(c.keep_running(), name=f"child:{c.role}") for c in children]
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
    await asyncio.gather(*(c.stop(settings.drain_seconds + 10) for c in children))
    for keeper in keepers:
        keeper.cancel()
    await runner.cleanup()
    log.info("stopped")

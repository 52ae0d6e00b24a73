"""What one gateway process holds while it runs, built by ``gateway.app``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from aiohttp import web

from adapters.web.send import WebHub
from adapters.web.uploads import Uploads
from agent_core.feedback import Feedback
from agent_core.files.blobs import Blobs
from agent_core.loop import TurnRunner
from agent_core.profiles import Profiles
from agent_core.scheduling.service import Schedules
from agent_core.settings import Settings
from agent_core.stores import Storage
from agent_core.stores.operations import OperatorStore
from agent_core.triggers import Triggers
from gateway.commands import ChatCommands
from gateway.inbound import Inbound
from gateway.metrics import Metrics
from gateway.supervisor import Supervisor


@dataclass(kw_only=True)
class Runtime:
    """The live parts of a gateway; routes reach them through ``app[RUNTIME]``."""

    settings: Settings
    owner: str
    store: Storage
    metrics: Metrics
    hub: WebHub
    runner: TurnRunner
    supervisor: Supervisor
    schedules: Schedules
    inbound: Inbound
    commands: ChatCommands
    # Ratings of the agent's replies (reactions, the web chat's buttons).
    feedback: Feedback
    # What applies where (``[[profile]]``).
    profiles: Profiles
    # The file store, and where web uploads wait (the web adapter's).
    files: Blobs
    uploads: Uploads
    # The operator's reads and actions (the console, erasure, retention, the audit log).
    operations: OperatorStore
    # Triggers: ``POST /api/triggers/{id}`` and ``triggers`` in chat.
    triggers: Triggers
    stopping: asyncio.Event = field(default_factory=asyncio.Event)


RUNTIME = web.AppKey("runtime", Runtime)

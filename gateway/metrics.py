"""Prometheus metrics, on a registry owned by the app (no module-level collectors)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from adapters.base import Hearing
from agent_core.events import utcnow
from agent_core.journaled import ModelCallOutput
from agent_core.records import ApprovalRecord, StartedRun, TurnRecord, TurnStatus

LAG_OVERLAP = timedelta(seconds=10)
_TURN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)


class Metrics:
    """The gateway's counters; also the turn runner's observer."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.inbound = Counter(
            "chatgate_inbound_events",
            "Inbound events by platform and what the ledger made of them.",
            ["platform", "outcome"],
            registry=self.registry,
        )
        self.dead_letters = Counter(
            "chatgate_dead_letters",
            "Platform updates set aside because they could not be processed.",
            ["platform"],
            registry=self.registry,
        )
        self.turns_started = Counter(
            "chatgate_turns_started",
            "Turns started or resumed.",
            ["platform"],
            registry=self.registry,
        )
        self.turns_finished = Counter(
            "chatgate_turns_finished",
            "Turns that finished with a reply.",
            ["platform"],
            registry=self.registry,
        )
        self.turns_failed = Counter(
            "chatgate_turns_failed",
            "Turns that ended in failure (the user was told).",
            ["platform"],
            registry=self.registry,
        )
        self.turn_seconds = Histogram(
            "chatgate_turn_duration_seconds",
            "Time from starting a turn to its reply being delivered.",
            ["platform"],
            buckets=_TURN_BUCKETS,
            registry=self.registry,
        )
        self.tool_calls = Counter(
            "chatgate_tool_calls",
            "Tool calls by tool and outcome (ok, error, invalid_arguments, timeout, denied).",
            ["tool", "status"],
            registry=self.registry,
        )
        self.approvals = Counter(
            "chatgate_approvals",
            "Approvals asked for, and how they ended (approved, allowed, denied, expired).",
            ["outcome"],
            registry=self.registry,
        )
        self.jobs = Gauge(
            "chatgate_jobs",
            "Queued turns (schedule runs, bg) not finished, by status (queued, running, "
            "waiting), in the whole database.",
            ["status"],
            registry=self.registry,
        )
        self.tool_seconds = Histogram(
            "chatgate_tool_duration_seconds",
            "How long tool calls ran, by tool.",
            ["tool"],
            buckets=_TURN_BUCKETS,
            registry=self.registry,
        )
        self.model_tokens = Counter(
            "chatgate_model_tokens",
            "Tokens the model was sent and answered with (prompt, completion).",
            ["kind"],
            registry=self.registry,
        )
        self.model_cost = Counter(
            "chatgate_model_cost_usd",
            "What model calls cost, by litellm's price list.",
            registry=self.registry,
        )
        self.context_tokens = Histogram(
            "chatgate_context_tokens",
            "Tokens per section of each assembled prompt (system, summary, history, current).",
            ["section"],
            buckets=(64, 256, 1024, 4096, 16384, 65536, 262144),
            registry=self.registry,
        )
        self.approval_wait = Histogram(
            "chatgate_approval_wait_seconds",
            "How long approval prompts waited for a person, by outcome.",
            ["outcome"],
            buckets=(5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 24 * 3600),
            registry=self.registry,
        )
        self.queue_lag = Gauge(
            "chatgate_queue_lag_seconds",
            "How long the oldest due job has been waiting to start, in the whole database.",
            registry=self.registry,
        )
        self.checkpoint_seconds = Histogram(
            "chatgate_checkpoint_seconds",
            "Time to make a write durable (commit), by transaction: the journal's checkpoints "
            "(begin_step, finish_step, reply_intent, reply_sent_and_next, ...) and the others.",
            ["what"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
            registry=self.registry,
        )
        self.turn_tokens = Histogram(
            "chatgate_turn_tokens",
            "Tokens (prompt plus completion) one turn used across its model calls.",
            buckets=(256, 1024, 4096, 16384, 65536, 262144, 1048576),
            registry=self.registry,
        )
        self._turn_tokens: dict[int, int] = {}
        self.schedule_lag = Histogram(
            "chatgate_schedule_lag_seconds",
            "How late schedule runs started: from the moment each was planned to start (its "
            "slot, or its moment in the jitter window) to its first turn's start, for the "
            "runs started in the whole database since this process started.",
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600),
            registry=self.registry,
        )
        self.lag_watermark = utcnow()
        self._lags_seen: dict[int, datetime] = {}
        self.turns_in_flight = Gauge(
            "chatgate_turns_in_flight", "Turns running in this process.", registry=self.registry
        )
        self.platform_connected = Gauge(
            "chatgate_platform_connected",
            "1 while this process's connection to the platform is up, 0 while it is down "
            "(absent where this process holds none).",
            ["platform"],
            registry=self.registry,
        )
        self.platform_deaf = Gauge(
            "chatgate_platform_deaf",
            "1 while the platform is deaf here: disconnected, or silent while updates wait.",
            ["platform"],
            registry=self.registry,
        )
        self.platform_last_event = Gauge(
            "chatgate_platform_last_event_timestamp_seconds",
            "When this process last received an event from the platform (Unix time).",
            ["platform"],
            registry=self.registry,
        )

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)

    def platforms_seen(self, hearings: Mapping[str, Hearing]) -> None:
        """Set each platform's gauges from its adapter's hearing."""
        for platform, hearing in hearings.items():
            if platform == "web":
                continue
            self.platform_deaf.labels(platform).set(0 if hearing.deaf_since is None else 1)
            if hearing.connected is not None:
                self.platform_connected.labels(platform).set(int(hearing.connected))
            else:  # another process holds the connection (or there is none to hold)
                with contextlib.suppress(KeyError):
                    self.platform_connected.remove(platform)
            if hearing.last_event_at is not None:
                self.platform_last_event.labels(platform).set(hearing.last_event_at)

    def jobs_seen(self, depth: dict[str, int], lag: float) -> None:
        """Set the job gauges from a count by status and the oldest due job's wait."""
        for status in ("queued", "running", "waiting"):
            self.jobs.labels(status).set(depth.get(status, 0))
        self.queue_lag.set(lag)

    def runs_started(self, runs: Sequence[StartedRun]) -> None:
        """Observe the lag of each schedule run not seen before (``runs`` come from the
        database, read from ``lag_watermark`` on)."""
        for run in runs:
            if run.id in self._lags_seen:
                continue
            self._lags_seen[run.id] = run.started_at
            self.schedule_lag.observe(run.lag)
            self.lag_watermark = max(self.lag_watermark, run.started_at)
        # A run another process committed late can carry a start a little before the
        # newest seen: read from LAG_OVERLAP before it, and skip what was counted.
        horizon = self.lag_watermark - LAG_OVERLAP
        self._lags_seen = {i: at for i, at in self._lags_seen.items() if at > horizon}

    @property
    def lag_since(self) -> datetime:
        """Where the next read of started runs begins."""
        return self.lag_watermark - LAG_OVERLAP

    def committed(self, what: str, seconds: float) -> None:
        """A write transaction committed (the database's observer)."""
        self.checkpoint_seconds.labels(what).observe(seconds)

    def tool_called(self, tool: str, status: str, seconds: float | None = None) -> None:
        """Count a tool call's outcome and time it when it ran."""
        self.tool_calls.labels(tool, status).inc()
        if seconds is not None:
            self.tool_seconds.labels(tool).observe(seconds)

    def model_called(self, turn: TurnRecord, output: ModelCallOutput) -> None:
        """Count a model call's tokens and cost, and the size of each context section."""
        spend = output.spend
        for kind, value in (
            ("prompt", spend.prompt_tokens),
            ("completion", spend.completion_tokens),
        ):
            if value:
                self.model_tokens.labels(kind).inc(value)
        self._turn_tokens[turn.id] = self._turn_tokens.get(turn.id, 0) + spend.tokens
        if spend.cost_usd:
            self.model_cost.inc(spend.cost_usd)
        for section, tokens in output.context_tokens.items():
            self.context_tokens.labels(section).observe(tokens)

    def approval_requested(self, tool: str) -> None:
        """Count a prompt sent to a person."""
        self.approvals.labels("requested").inc()

    def approval_ended(self, approval: ApprovalRecord) -> None:
        """Count a decision or an expiry, and how long the prompt waited for it."""
        self.approvals.labels(approval.status).inc()
        if approval.created_at is not None:
            ended = approval.decided_at or utcnow()
            waited = (ended - approval.created_at).total_seconds()
            self.approval_wait.labels(approval.status).observe(max(0.0, waited))

    def turn_started(self, turn: TurnRecord) -> None:
        """Count a started turn."""
        self.turns_started.labels(turn.conversation.platform).inc()
        self.turns_in_flight.inc()

    def turn_finished(self, turn: TurnRecord, *, status: TurnStatus | None, seconds: float) -> None:
        """Count a finished turn and its latency (an interrupted one only leaves the gauge)."""
        platform = turn.conversation.platform
        self.turns_in_flight.dec()
        used = self._turn_tokens.pop(turn.id, 0)
        if status is None:
            return
        if used:
            self.turn_tokens.observe(used)
        counter = self.turns_finished if status == "done" else self.turns_failed
        counter.labels(platform).inc()
        self.turn_seconds.labels(platform).observe(seconds)

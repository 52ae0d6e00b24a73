"""The permission pipeline: may this tool call run now, be refused, or wait for a person?

A pipeline is an ordered list of checks, each ``(call, context) -> allow | deny | ask |
None``. The first answer wins; when every check passes (None), the answer is ``ask``.
The standard order is: denials from policy, then grants made in the conversation ("Allow
in this conversation"), then the other policy rules, then the built-in defaults.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator, model_validator

from agent_core.records import ApprovalRoute
from agent_core.secrets import refers_to_secret

Decision: TypeAlias = Literal["allow", "deny", "ask"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """A call the model asked for, with validated arguments."""

    name: str
    arguments: Mapping[str, JsonValue]


@dataclass(frozen=True, slots=True, kw_only=True)
class PermissionContext:
    """Who asks, where, and what this conversation already allowed."""

    user: str
    conversation_id: str
    grants: frozenset[str] = field(default_factory=frozenset)
    # The turn reads external content (a trigger's): what outlives it asks first.
    external: bool = False


Check: TypeAlias = Callable[[ToolCall, PermissionContext], Decision | None]


class PolicyRule(BaseModel):
    """One ``[[policy]]`` entry of chatgate.toml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str = Field(min_length=1)
    args: dict[str, str] = Field(default_factory=dict)
    decision: Decision
    approvers: list[str] = Field(default_factory=list)
    # False: whoever asked for the call may not approve it; another approver must.
    self_approve: bool = True
    # False: "Allow in this conversation" is not offered; each call is decided on its own.
    always_allow: bool = True
    # Minutes the approval waits before it expires (denied) or is passed on to
    # ``escalate_to``; unset: the setting's.
    timeout: float | None = Field(None, gt=0, le=7 * 24 * 60)
    # Where the prompt shows: in the conversation ("here"), in the named approvers' DMs
    # (the conversation sees "waiting for approval by ..."), or both.
    route: Literal["here", "approvers", "both"] = "here"
    # Who gets the prompt (in a DM) when nobody decided by its timeout: platform:user_id.
    escalate_to: list[str] = Field(default_factory=list)

    @field_validator("approvers")
    @classmethod
    def _approvers(cls, value: list[str]) -> list[str]:
        for entry in value:
            platform, sep, rest = entry.partition(":")
            if not sep or not rest:
                raise ValueError(
                    f"approvers are platform:user_id, role:admin or role:member, not {entry!r}"
                )
            if platform == "role" and rest not in ("admin", "member"):
                raise ValueError(f"unknown role {rest!r}: use role:admin or role:member")
        return value

    @field_validator("escalate_to")
    @classmethod
    def _people(cls, value: list[str]) -> list[str]:
        for entry in value:
            platform, sep, rest = entry.partition(":")
            if not sep or not rest or platform == "role":
                raise ValueError(f"escalate_to names people (platform:user_id), not {entry!r}")
        return value

    @model_validator(mode="after")
    def _routed_to_someone(self) -> PolicyRule:
        if self.route != "here" and not any(not a.startswith("role:") for a in self.approvers):
            raise ValueError(
                f'route = "{self.route}" sends the prompt to the approvers\' DMs: name them '
                "in approvers (platform:user_id)"
            )
        return self

    @field_validator("args")
    @classmethod
    def _patterns_compile(cls, value: dict[str, str]) -> dict[str, str]:
        for name, pattern in value.items():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(
                    f"args.{name}: {pattern!r} is not a regular expression: {exc}"
                ) from None
        return value

    def matches(self, call: ToolCall) -> bool:
        """True when the tool matches and every argument pattern matches the WHOLE value.

        ``.`` matches newlines too (so a denial ``.*rm -rf.*`` is not side-stepped by a line
        break); an allow pattern that lists what it allows (``ls( -[a-z]+)*``) cannot be
        extended with ``; anything``, ``&& ...``, ``$(...)`` or a second line."""
        if self.tool not in (call.name, "*"):
            return False
        return all(
            re.fullmatch(pattern, _text(call.arguments.get(name)), re.DOTALL) is not None
            for name, pattern in self.args.items()
        )


def _text(value: JsonValue | None) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


# Tools whose effect outlives the turn: work that runs later, facts recalled later.
LASTING = frozenset({"schedule_task", "cancel_schedule", "remember", "forget"})


def _defaults(call: ToolCall, context: PermissionContext) -> Decision | None:
    """CONTRACT.md's default policies for the built-in tools. A turn that reads external
    content (a trigger's) asks before it leaves anything lasting behind: a schedule would
    run its text later outside the frame, a fact would come back in people's own turns."""
    if context.external and call.name in LASTING:
        return "ask"
    match call.name:
        case "schedule_task" | "list_schedules" | "cancel_schedule":
            return "allow"
        case "remember" | "recall" | "forget":
            return "allow"
        case "send_file":
            return "allow"  # into the conversation it runs for, and nowhere else
        case "http_request":
            # A request that carries a credential asks, unless a policy rule allows it.
            if carries_secret(call):
                return "ask"
            return "allow" if _text(call.arguments.get("method")).upper() == "GET" else "ask"
        case "run_command":
            return "ask"
        case _:
            return None


def carries_secret(call: ToolCall) -> bool:
    """Does any argument refer to a secret (``{{secret:NAME}}``)?"""
    return any(refers_to_secret(_text(value)) for value in _strings(call))


def _strings(call: ToolCall) -> list[JsonValue]:
    """Every value of the call's arguments, those inside objects and lists too."""
    found: list[JsonValue] = []
    pending: list[JsonValue] = list(call.arguments.values())
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
        else:
            found.append(value)
    return found


def _granted(call: ToolCall, context: PermissionContext) -> bool:
    return call.name in context.grants


class Permissions:
    """The pipeline built from policy rules; also answers who may approve a call."""

    def __init__(self, rules: Sequence[PolicyRule] = (), *, checks: Sequence[Check] = ()) -> None:
        self._rules = tuple(rules)
        denials = [rule for rule in self._rules if rule.decision == "deny"]
        others = [rule for rule in self._rules if rule.decision != "deny"]
        self._checks: tuple[Check, ...] = (
            _rules_check(denials),
            self._grants,
            _rules_check(others),
            *checks,
            _defaults,
        )

    def decide(self, call: ToolCall, context: PermissionContext) -> Decision:
        """The first answer of the pipeline, or ``ask``."""
        for check in self._checks:
            decision = check(call, context)
            if decision is not None:
                return decision
        return "ask"

    def _grants(self, call: ToolCall, context: PermissionContext) -> Decision | None:
        """A grant ("Allow in this conversation") allows the tool there, except for a call
        a rule wants a particular approval for (named approvers, or not the requester's
        own) and a call that would send a secret: those are asked each time."""
        if not _granted(call, context) or carries_secret(call):
            return None
        for rule in self._rules:
            particular = rule.approvers or not rule.self_approve
            if rule.decision == "ask" and particular and rule.matches(call):
                return None
        return "allow"

    def approvers(self, call: ToolCall) -> tuple[str, ...]:
        """Extra approvers named by the rules matching this call (besides requester, admins)."""
        found: list[str] = []
        for rule in self._rules:
            if rule.matches(call):
                found.extend(a for a in rule.approvers if a not in found)
        return tuple(found)

    def timeout(self, call: ToolCall) -> timedelta | None:
        """How long an approval of this call waits (the shortest ``timeout`` of the rules
        matching it; None: the setting's)."""
        minutes = [rule.timeout for rule in self._rules if rule.timeout and rule.matches(call)]
        return timedelta(minutes=min(minutes)) if minutes else None

    def route(self, call: ToolCall) -> ApprovalRoute:
        """Where this call's prompt shows: "both" or "approvers" when a matching rule says
        so (the first that does), else in the conversation."""
        for rule in self._rules:
            if rule.route != "here" and rule.matches(call):
                return rule.route
        return "here"

    def escalate_to(self, call: ToolCall) -> tuple[str, ...]:
        """Who gets this call's prompt when nobody decided in time (the matching rules')."""
        found: list[str] = []
        for rule in self._rules:
            if rule.matches(call):
                found.extend(person for person in rule.escalate_to if person not in found)
        return tuple(found)

    def always_allow(self, call: ToolCall) -> bool:
        """Is "Allow in this conversation" offered for this call? No, when any matching
        rule says so."""
        return all(rule.always_allow for rule in self._rules if rule.matches(call))

    def self_approve(self, call: ToolCall) -> bool:
        """May the requester approve this call? No, when any matching rule says so."""
        return all(rule.self_approve for rule in self._rules if rule.matches(call))


def _rules_check(rules: Sequence[PolicyRule]) -> Check:
    def check(call: ToolCall, context: PermissionContext) -> Decision | None:
        for rule in rules:
            if rule.matches(call):
                return rule.decision
        return None

    return check

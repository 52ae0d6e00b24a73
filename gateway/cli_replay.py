"""``chatgate replay`` and ``chatgate eval``: journaled turns (and eval cases) run again
against another model or system prompt, with the recorded tool results served back.

Nothing here reaches a platform, runs a tool or writes to a conversation: the replay loop
(``agent_core.replay.runner``) is given a model and nothing else, and the only database
write is each model call's spend (so the budgets count it).
"""

from __future__ import annotations

import asyncio
import getpass
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

if TYPE_CHECKING:
    from agent_core.model import Model
    from agent_core.replay.evals import CaseResult
    from agent_core.replay.recorded import RecordedTurn, Selection
    from agent_core.replay.spending import RunBudget
    from agent_core.replay.suites import Suite
    from agent_core.section_settings import ProfileSetting
    from agent_core.settings import Settings
    from agent_core.storage.replay import Recordings

T = TypeVar("T")

# What a replay's prompt may read of the history before the turn (as a turn's does).
HISTORY_LIMIT = 200


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"chatgate: {message}", err=True)
    return typer.Exit(code)


def _moment(value: str | None, option: str) -> datetime | None:
    """An ISO date or date and time (UTC unless it says otherwise)."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise _fail(
            f"{option}: expected a date (2026-12-01) or a time (2026-12-01T09:00)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _model(settings: Settings, name: str | None, api_base: str | None, option: str) -> Model:
    """The model to replay with: ``name`` (the settings' own when None), on ``api_base``,
    or on the settings' server and key when it is on the same provider as theirs."""
    from workers.models import model_named

    chosen = name or settings.model
    if not chosen:
        raise _fail(f"{option}: no model given and CHATGATE_MODEL is not set")
    return model_named(settings, chosen, api_base=api_base)


def _profile(settings: Settings, name: str | None) -> ProfileSetting:
    """The ``[[profile]]`` named ``name`` (an empty one for None); exit 2 when none is."""
    from agent_core.section_settings import ProfileSetting

    if name is None:
        return ProfileSetting(name="settings")
    for profile in settings.profile:
        if profile.name == name:
            return profile
    known = ", ".join(p.name for p in settings.profile) or "none in chatgate.toml"
    raise _fail(f"--profile: no [[profile]] named {name!r} (known: {known})")


def _system_prompt(settings: Settings, text: str | None, file: Path | None) -> str:
    if text is not None and file is not None:
        raise _fail("--system-prompt and --system-prompt-file: give one of them")
    if file is not None:
        try:
            return file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise _fail(f"--system-prompt-file: cannot read {file}: {exc}") from None
    return text if text is not None else settings.system_prompt


async def offered_specs(settings: Settings, recordings: Recordings) -> list[dict[str, Any]]:
    """The built-in tools' descriptions, as a turn is offered them (none is ever run here;
    MCP servers are not started: their tools come from the recorded calls)."""
    from agent_core.events import ConversationKey
    from agent_core.storage.store import Store
    from agent_core.tools.base import TurnContext
    from agent_core.tools.http_request import http_request_factory
    from agent_core.tools.memory_tools import memory_tools_factory
    from agent_core.tools.registry import ToolRegistry
    from agent_core.tools.schedule_tools import schedule_tools_factory
    from workers.bootstrap import build_schedules, load_secrets

    store = Store(recordings.database)
    http = settings.tools.http_request
    registry = ToolRegistry(
        [
            schedule_tools_factory(build_schedules(settings, store)),
            memory_tools_factory(store, admins=settings.admins),
            http_request_factory(
                allowed_hosts=http.allowed_hosts,
                secrets=load_secrets(settings, {}),
                timeout=http.timeout,
                output_limit=http.output_limit,
            ),
        ]
    )
    where = ConversationKey(platform="web", workspace="replay", channel="replay")
    context = TurnContext(turn_id=0, conversation_id="", conversation=where, user="replay")
    return [tool.spec() for tool in registry.tools_for(context).values()]


def _budget(
    settings: Settings, recordings: Recordings | None, actor: str, max_cost: float | None
) -> RunBudget:
    from agent_core.replay.spending import RunBudget
    from workers.bootstrap import budget_limits

    return RunBudget(recordings, actor=actor, limits=budget_limits(settings), max_cost=max_cost)


def _with_recordings(settings: Settings, action: Callable[[Recordings], Awaitable[T]]) -> T:
    from agent_core.errors import StorageError
    from agent_core.storage.database import open_database
    from agent_core.storage.replay import Recordings

    async def go() -> T:
        async with open_database(settings.database_url) as database:
            return await action(Recordings(database))

    try:
        return asyncio.run(go())
    except StorageError as exc:
        raise _fail(f"database: {exc}", 1) from None


def _estimate(model: str, turns: Sequence[RecordedTurn], extra_calls: int = 0) -> str:
    """What a dry run says: how many calls, how many tokens, roughly what they cost."""
    from agent_core.model_litellm import price

    calls = sum(max(1, t.original.model_calls) for t in turns) + extra_calls
    prompt = sum(t.original.prompt_tokens for t in turns)
    completion = sum(t.original.completion_tokens for t in turns)
    cost = price(model, prompt_tokens=prompt, completion_tokens=completion)
    priced = (
        f"about ${cost:.4f} at {model}'s list price"
        if cost is not None
        else f"{model} is not in litellm's price list, so no cost estimate"
    )
    return (
        f"about {calls} model calls and {prompt + completion} tokens "
        f"(as many as the recorded turns used); {priced}"
    )


def _write(path: Path | None, text: str, what: str) -> None:
    """Write a report whole or not at all (a file of the same name stays as it was until
    the new one is complete); text no file can hold (a lone surrogate) becomes U+FFFD."""
    from agent_core.replay.recorded import well_formed

    if path is None:
        return
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        partial.write_text(well_formed(text), encoding="utf-8")
        os.replace(partial, path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise _fail(f"cannot write the {what} to {path}: {exc}", 1) from None
    typer.echo(f"{what} written to {path}")


# Options replay and eval share.
Profile = Annotated[
    str | None, typer.Option(help="a profile of chatgate.toml: its model and system prompt")
]
ApiBase = Annotated[str | None, typer.Option(help="the model's server (OpenAI-compatible)")]
SystemPrompt = Annotated[str | None, typer.Option(help="the system prompt to try")]
SystemPromptFile = Annotated[Path | None, typer.Option(help="the system prompt, from a file")]
JsonOut = Annotated[Path | None, typer.Option("--json", help="write the JSON report here")]
HtmlOut = Annotated[Path | None, typer.Option("--html", help="write the HTML report here")]
MaxCost = Annotated[float | None, typer.Option(min=0, help="stop once this run spent USD")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="say what it would cost, and stop")]


def replay(
    turn_ids: Annotated[
        list[int] | None, typer.Argument(help="turn ids (default: every selected turn)")
    ] = None,
    conversation: str | None = typer.Option(None, help="only this conversation's turns"),
    since: str | None = typer.Option(None, help="only turns from then on (2026-12-01)"),
    until: str | None = typer.Option(None, help="only turns before then"),
    platform: str | None = typer.Option(None, help="slack, telegram, discord or web"),
    feedback: str | None = typer.Option(None, help="only turns rated up, down or any"),
    limit: int = typer.Option(50, min=1, max=10_000, help="at most this many turns"),
    profile: Profile = None,
    model: str | None = typer.Option(None, help="the model to replay with (litellm name)"),
    api_base: ApiBase = None,
    system_prompt: SystemPrompt = None,
    system_prompt_file: SystemPromptFile = None,
    json_out: JsonOut = None,
    html_out: HtmlOut = None,
    max_cost: MaxCost = None,
    dry_run: DryRun = False,
) -> None:
    """Run past turns again against another model or system prompt, with the recorded
    tool results served back (no tool runs, nothing is sent, no conversation changes),
    and show what changed."""
    from agent_core.replay.recorded import Selection

    settings = _settings_loader()
    if feedback not in (None, "up", "down", "any"):
        raise _fail("--feedback: up, down or any")
    if platform not in (None, "slack", "telegram", "discord", "web"):
        raise _fail("--platform: slack, telegram, discord or web")
    selection = Selection(
        turn_ids=tuple(turn_ids or ()),
        conversation_id=conversation,
        platform=platform,
        since=_moment(since, "--since"),
        until=_moment(until, "--until"),
        feedback=feedback,
        limit=limit,
    )
    trying = _profile(settings, profile)
    prompt = _system_prompt(settings, system_prompt or trying.system_prompt, system_prompt_file)
    chosen = _model(settings, model or trying.model, api_base or trying.api_base, "--model")
    code = _with_recordings(
        settings,
        lambda recordings: _replay(
            settings,
            recordings,
            selection,
            model=chosen,
            system_prompt=prompt,
            max_cost=max_cost,
            dry_run=dry_run,
            json_out=json_out,
            html_out=html_out,
        ),
    )
    raise typer.Exit(code)


def eval_suite(
    suite: str = typer.Argument(
        ..., help="the suite file (.toml, .yaml), or add to make a case of a turn"
    ),
    turn_id: int | None = typer.Argument(None, help="with add: the journaled turn"),
    to: Annotated[Path | None, typer.Option(help="with add: the TOML suite to add it to")] = None,
    feedback: str | None = typer.Option(
        None, help="with add: every turn rated up, down or any (instead of TURN_ID)"
    ),
    limit: int = typer.Option(50, min=1, max=10_000, help="with add --feedback: at most"),
    profile: Profile = None,
    model: str | None = typer.Option(None, help="the model to score (litellm name)"),
    api_base: ApiBase = None,
    judge_model: str | None = typer.Option(None, help="the model that grades judge checks"),
    judge_api_base: str | None = typer.Option(None, help="the judge's server"),
    system_prompt: SystemPrompt = None,
    system_prompt_file: SystemPromptFile = None,
    baseline: Annotated[
        Path | None,
        typer.Option(help="the stored run to compare with (default SUITE.baseline.json)"),
    ] = None,
    save_baseline: bool = typer.Option(
        False, "--save-baseline", help="store this run as the baseline"
    ),
    json_out: JsonOut = None,
    html_out: HtmlOut = None,
    max_cost: MaxCost = None,
    dry_run: DryRun = False,
) -> None:
    """Score an eval suite: run every case of SUITE against --model, check each answer,
    compare with the baseline, and exit 1 when a case fails that did not fail in the
    baseline. chatgate eval add TURN_ID --to SUITE makes a case of a real turn."""
    settings = _settings_loader()
    if suite == "add":
        if (turn_id is None) == (feedback is None) or to is None:
            raise _fail(
                "eval add: chatgate eval add TURN_ID --to SUITE.toml, or "
                "chatgate eval add --feedback down --to SUITE.toml"
            )
        if feedback not in (None, "up", "down", "any"):
            raise _fail("--feedback: up, down or any")
        _add_cases(settings, to, turn_id=turn_id, feedback=feedback, limit=limit)
        return
    if turn_id is not None:
        raise _fail(f"eval: unexpected argument {turn_id} (did you mean eval add?)")
    from agent_core.replay.evals import read_baseline
    from agent_core.replay.suites import SuiteError, load_suite

    path = Path(suite)
    try:
        loaded = load_suite(path)
        stored = baseline or path.with_name(f"{path.stem}.baseline.json")
        before = read_baseline(stored)
    except SuiteError as exc:
        raise _fail(f"eval: {exc}") from None
    trying = _profile(settings, profile)
    prompt = _system_prompt(
        settings, system_prompt or trying.system_prompt or loaded.system_prompt, system_prompt_file
    )
    chosen = _model(settings, model or trying.model, api_base or trying.api_base, "--model")
    judge_name = judge_model or loaded.judge_model
    judge = _model(settings, judge_name, judge_api_base, "--judge-model") if judge_name else None
    run = _EvalRun(
        suite=loaded,
        model=chosen,
        judge=judge,
        system_prompt=prompt,
        baseline=before,
        baseline_path=stored,
        save_baseline=save_baseline,
        max_cost=max_cost,
        dry_run=dry_run,
        json_out=json_out,
        html_out=html_out,
    )
    code = _with_recordings(settings, lambda recordings: run.go(settings, recordings))
    raise typer.Exit(code)


_settings_loader: Callable[[], Settings]


def register(app: typer.Typer, settings_loader: Callable[[], Settings]) -> None:
    """Add ``replay`` and ``eval`` to the ``chatgate`` command; ``settings_loader`` loads
    the settings or exits 2 naming the bad one."""
    global _settings_loader
    _settings_loader = settings_loader
    app.command()(replay)
    app.command("eval")(eval_suite)


def _add_cases(
    settings: Settings, suite: Path, *, turn_id: int | None, feedback: str | None, limit: int
) -> None:
    """Append journaled turns to a TOML suite as cases (the file is made when new): one
    turn, or every turn rated so."""
    from agent_core.replay.case_file import case_toml, toml_string
    from agent_core.replay.recorded import Selection

    if suite.suffix != ".toml":
        raise _fail("eval add: cases are added to a .toml suite")

    async def found(recordings: Recordings) -> list[RecordedTurn]:
        ids = [turn_id] if turn_id is not None else []
        if feedback is not None:
            ids = await recordings.select(Selection(feedback=feedback, limit=limit))
        turns = [await recordings.turn(i, history_limit=HISTORY_LIMIT) for i in ids]
        return [t for t in turns if t is not None]

    turns = _with_recordings(settings, found)
    if not turns:
        what = f"turn {turn_id} does not exist or never called the model"
        raise _fail(f"eval add: {what if feedback is None else 'no turn is rated ' + feedback}", 1)
    fresh = not suite.exists()
    try:
        with suite.open("a", encoding="utf-8") as out:
            if fresh:
                out.write(f"[suite]\nname = {toml_string(suite.stem)}\n")
            for turn in turns:
                out.write(case_toml(turn))
    except OSError as exc:
        raise _fail(f"cannot write {suite}: {exc}", 1) from None
    for turn in turns:
        typer.echo(f"turn {turn.id} added to {suite} as a case")


async def _replay(
    settings: Settings,
    recordings: Recordings,
    selection: Selection,
    *,
    model: Model,
    system_prompt: str,
    max_cost: float | None,
    dry_run: bool,
    json_out: Path | None,
    html_out: Path | None,
) -> int:
    from agent_core.replay.report import compare, table, to_html, to_json
    from agent_core.replay.runner import Replayer

    try:
        ids = await recordings.select(selection)
        if not ids:
            typer.echo("no finished turn matches the selection")
            return 1
        turns = [
            found
            for found in [await recordings.turn(i, history_limit=HISTORY_LIMIT) for i in ids]
            if found is not None
        ]
        typer.echo(
            f"{len(turns)} turns to replay against {model.name}: {_estimate(model.name, turns)}"
        )
        if dry_run:
            return 0
        budget = _budget(settings, recordings, f"replay:{getpass.getuser()}", max_cost)
        replayer = Replayer(
            model,
            system_prompt=system_prompt,
            specs=await offered_specs(settings, recordings),
            max_tokens=settings.reply_max_tokens,
            max_steps=settings.max_steps,
            may_spend=budget.may_spend,
            spent=budget.spent,
        )
        comparisons = []
        for turn in turns:
            rerun = await replayer.run(turn.scenario, turn.original.calls)
            comparisons.append(compare(turn, rerun))
    finally:
        await model.aclose()
    typer.echo(table(comparisons, model=model.name))
    _write(
        json_out, to_json(comparisons, model=model.name, system_prompt=system_prompt), "JSON report"
    )
    _write(
        html_out, to_html(comparisons, model=model.name, system_prompt=system_prompt), "HTML report"
    )
    return 0


@dataclass(kw_only=True)
class _EvalRun:
    suite: Suite
    model: Model
    judge: Model | None
    system_prompt: str
    baseline: dict[str, bool]
    baseline_path: Path
    save_baseline: bool
    max_cost: float | None
    dry_run: bool
    json_out: Path | None
    html_out: Path | None

    async def go(self, settings: Settings, recordings: Recordings) -> int:
        from agent_core.replay.evals import (
            CaseResult,
            Scored,
            check,
            model_judge,
            report_html,
            report_json,
            report_table,
        )
        from agent_core.replay.runner import Replayer

        try:
            cases: list[tuple[Any, Any, Any, Any]] = []
            for case in self.suite.cases:
                if case.turn is None:
                    cases.append((case, case.scenario, case.tools, None))
                    continue
                turn = await recordings.turn(case.turn, history_limit=HISTORY_LIMIT)
                if turn is None:
                    typer.echo(
                        f"chatgate: eval: case {case.name!r}: turn {case.turn} not found", err=True
                    )
                    return 2
                cases.append((case, turn.scenario, turn.original.calls, turn))
            judged = sum(1 for c in self.suite.cases if c.expect.judge is not None)
            typer.echo(
                f"{len(cases)} cases against {self.model.name}: about {len(cases)} model calls or "
                f"more (one per step), and {judged} judge calls"
            )
            if self.dry_run:
                return 0
            budget = _budget(settings, recordings, f"eval:{getpass.getuser()}", self.max_cost)
            replayer = Replayer(
                self.model,
                system_prompt=self.system_prompt,
                specs=await offered_specs(settings, recordings),
                max_tokens=settings.reply_max_tokens,
                max_steps=settings.max_steps,
                may_spend=budget.may_spend,
                spent=budget.spent,
            )
            judge = model_judge(self.judge, on_spend=budget.spent) if self.judge else None
            results: list[CaseResult] = []
            for case, scenario, tools, turn in cases:
                rerun = await replayer.run(scenario, tools)
                checks = await check(case, scenario, rerun, judge)
                results.append(
                    CaseResult(case=case, scenario=scenario, rerun=rerun, checks=checks, turn=turn)
                )
        finally:
            await self.model.aclose()
            if self.judge is not None:
                await self.judge.aclose()
        scored = Scored(results=tuple(results), baseline=self.baseline)
        typer.echo(report_table(self.suite, scored, model=self.model.name))
        document = report_json(self.suite, scored, model=self.model.name)
        _write(self.json_out, document, "JSON report")
        _write(self.html_out, report_html(self.suite, scored, model=self.model.name), "HTML report")
        if self.save_baseline:
            _write(self.baseline_path, document, "baseline")
            return 0
        return 1 if scored.regressions() else 0

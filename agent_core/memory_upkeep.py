"""Memory upkeep: facts picked out of finished turns, and the nightly review of new facts.

Both run as jobs (``extract`` and ``maintain``), with the summary model (cheaper, by
``CHATGATE_SUMMARY_MODEL``). The model answers in JSON; an answer that is not the JSON
asked for stores no fact and supersedes none, and is logged: a wrong memory is worse than a
missing one (a fact whose review got no usable answer is reviewed again next time). A model
error is raised, so the job is retried with backoff.

Review: each new fact of a person is compared with the person's older live facts in the
same scope that share words with it. An exact repeat (same words, any case or punctuation)
is superseded without asking; the rest are shown to the model, which names the older
facts the new one makes obsolete: the same fact again, or one it contradicts. Newer wins;
the older fact stays in the table (superseded, not deleted), so nothing is lost that a
person might ask about.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Protocol

import structlog

from agent_core.journaled import Spend
from agent_core.model import ChatMessage, Model, ModelReply
from agent_core.records import JobRecord, MemoryRecord
from agent_core.stores import Journal, MemoryStore

log = structlog.get_logger("chatgate.memory")

EXTRACT_ASK = "You pick durable facts about a person out of one exchange"
REVIEW_ASK = "You keep a person's remembered facts consistent"
_EXTRACT_SYSTEM = (
    f"{EXTRACT_ASK} with an assistant, to remember in later conversations. Keep only facts "
    "that will still be true and useful next week: who they are, their preferences, their "
    "projects, standing instructions. Leave out small talk, one-off requests, anything about "
    "the assistant, and anything uncertain. Each fact is one short sentence in the third "
    'person ("Prefers metric units."), with "about": a short lower-case key for what it is '
    'about ("units"), so a later fact about the same thing replaces it. Reply with JSON '
    'only: {"facts": [{"fact": "...", "about": "..."}]}, at most 5, or {"facts": []}.'
)
_REVIEW_SYSTEM = (
    f"{REVIEW_ASK}. You get one new fact and older facts about the same person. Name the "
    "older facts the new one makes obsolete: ones that say the same thing, and ones it "
    "contradicts (the new fact is the true one now). Facts that merely relate to it stay. "
    'Reply with JSON only: {"obsolete": [ids]}, or {"obsolete": []}.'
)
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")
_NOT_WORDS = re.compile(r"\W+", re.UNICODE)
MAX_FACTS = 5
MAX_FACT_CHARS = 500
EXTRACT_MAX_TOKENS = 400
REVIEW_MAX_TOKENS = 100
REVIEW_BATCH = 200
CANDIDATES = 8


class UpkeepStore(MemoryStore, Journal, Protocol):
    """What this module asks of the storage."""


def _json_object(reply: ModelReply) -> dict[str, Any] | None:
    text = _FENCE.sub("", reply.text.strip())
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def parse_facts(reply: ModelReply) -> list[tuple[str, str | None]] | None:
    """The (fact, about) pairs of an extraction answer; None when it is not the JSON asked."""
    value = _json_object(reply)
    if value is None or not isinstance(value.get("facts"), list):
        return None
    facts: list[tuple[str, str | None]] = []
    for item in value["facts"][:MAX_FACTS]:
        if not isinstance(item, dict) or not isinstance(item.get("fact"), str):
            return None
        fact = item["fact"].strip()[:MAX_FACT_CHARS]
        about = item.get("about")
        about = about.strip().lower()[:200] or None if isinstance(about, str) else None
        if fact:
            facts.append((fact, about))
    return facts


def parse_obsolete(reply: ModelReply, offered: Sequence[int]) -> list[int] | None:
    """The ids of a review answer, only among those offered; None when not the JSON asked."""
    value = _json_object(reply)
    if value is None or not isinstance(value.get("obsolete"), list):
        return None
    return [
        i
        for i in value["obsolete"]
        if isinstance(i, int) and not isinstance(i, bool) and i in offered
    ]


def same_words(a: str, b: str) -> bool:
    """Two facts that differ only in case, spacing and punctuation."""
    return _NOT_WORDS.sub(" ", a.lower()).strip() == _NOT_WORDS.sub(" ", b.lower()).strip()


def _spend(reply: ModelReply) -> Spend:
    return Spend(
        model=reply.model,
        prompt_tokens=reply.prompt_tokens,
        completion_tokens=reply.completion_tokens,
        cost_usd=reply.cost_usd,
    )


class MemoryUpkeep:
    """Runs ``extract`` and ``maintain`` jobs."""

    def __init__(self, store: UpkeepStore, model: Model | None) -> None:
        self._store = store
        self._model = model

    async def run(self, job: JobRecord, *, owner: str) -> None:
        """Do the job's work. An extract job is closed here, with its facts, in one
        transaction (so a turn's facts are stored once, however often the job is run); a
        maintain job changes nothing more when run again."""
        if self._model is None:
            log.warning("memory upkeep skipped: no model is configured", kind=job.kind)
            return
        if job.kind == "extract":
            assert job.turn_id is not None
            await self.extract(job.id, job.turn_id, self._model, owner=owner)
        elif job.kind == "maintain":
            assert job.user is not None
            await self.maintain(job.user, self._model)
        else:
            raise ValueError(f"not a memory job: {job.kind}")

    async def extract(self, job_id: int, turn_id: int, model: Model, *, owner: str) -> int:
        """Pick durable facts out of a finished turn, store them and close the job; how
        many were stored."""
        turn = await self._store.load_turn(turn_id)
        replies = [s for s in turn.steps if s.kind == "reply" and isinstance(s.input, dict)]
        answer = str(replies[-1].input.get("text", "")) if replies else ""  # type: ignore[union-attr]
        known = await self._store.recall(
            user=turn.user, conversation_id=turn.conversation_id, query=turn.trigger_text
        )
        lines = [f"The person said: {turn.trigger_text}", f"The assistant answered: {answer}"]
        if known:
            lines.append("Already remembered: " + "; ".join(m.fact for m in known))
        reply = await model.complete(
            [
                ChatMessage(role="system", content=_EXTRACT_SYSTEM),
                ChatMessage(role="user", content="\n\n".join(lines)),
            ],
            max_tokens=EXTRACT_MAX_TOKENS,
        )
        facts = parse_facts(reply)
        if facts is None:
            log.warning("fact extraction answer was not the JSON asked for; nothing stored")
        fresh = [f for f in facts or [] if not any(same_words(f[0], m.fact) for m in known)]
        stored = await self._store.finish_extraction(
            job_id, owner=owner, turn_id=turn_id, facts=fresh, spend=_spend(reply)
        )
        if stored is None:
            log.warning("extraction not stored: the job is no longer ours")
            return 0
        log.info("facts extracted", stored=stored)
        return stored

    async def maintain(self, user: str, model: Model) -> int:
        """Review a person's new facts against their older ones; how many were superseded."""
        superseded = 0
        after = 0
        while batch := await self._store.unreviewed_facts(user, after=after, limit=REVIEW_BATCH):
            for fact in batch:
                superseded += await self._review(user, fact, model)
            after = batch[-1].id
        log.info("memory maintained", user=user, superseded=superseded)
        return superseded

    async def _review(self, user: str, fact: MemoryRecord, model: Model) -> int:
        older = await self._store.similar_older_facts(user, fact, limit=CANDIDATES)
        repeats = [m.id for m in older if same_words(m.fact, fact.fact)]
        rest = [m for m in older if m.id not in repeats]
        obsolete: list[int] | None = list(repeats)
        spend: Spend | None = None
        if rest:
            listing = "\n".join(f"- id {m.id} ({m.created_at:%Y-%m-%d}): {m.fact}" for m in rest)
            reply = await model.complete(
                [
                    ChatMessage(role="system", content=_REVIEW_SYSTEM),
                    ChatMessage(
                        role="user",
                        content=(
                            f"New fact ({fact.created_at:%Y-%m-%d}): {fact.fact}\n\n"
                            f"Older facts:\n{listing}"
                        ),
                    ),
                ],
                max_tokens=REVIEW_MAX_TOKENS,
            )
            spend = _spend(reply)
            named = parse_obsolete(reply, [m.id for m in rest])
            if named is None:
                # Not reviewed: the next review asks again; repeats wait for it too.
                log.warning("memory review answer was not the JSON asked for", memory_id=fact.id)
                obsolete = None
            else:
                obsolete = repeats + named
        return await self._store.review_fact(user, fact, obsolete=obsolete, spend=spend)

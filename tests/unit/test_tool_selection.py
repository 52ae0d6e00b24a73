"""With more tools than the limit, a turn is offered the built-ins, the tools that match its
message, and more_tools, which offers further matches from the next step on."""

from __future__ import annotations

from agent_core.events import ConversationKey
from agent_core.tools.base import Tool, ToolContext, TurnContext
from agent_core.tools.selection import MORE_TOOLS, Offer

TURN = TurnContext(
    turn_id=1,
    conversation_id="c",
    conversation=ConversationKey(platform="web", workspace="local", channel="x"),
    user="web:local",
)


def _tool(name: str, description: str) -> Tool:
    async def run(context: ToolContext) -> str:
        return name

    return Tool(run, name=name, description=description, idempotent=True)


def _tools() -> dict[str, Tool]:
    tools = {
        t.name: t
        for t in (_tool("recall", "Search memories"), _tool("run_command", "Run a shell command"))
    }
    topics = ["issue", "ticket", "calendar", "invoice", "weather", "deploy", "alert", "wiki"]
    for server in ("github", "jira", "ops", "misc", "docs"):
        for topic in topics:
            tool = _tool(f"{server}__{topic}_tool", f"Work with {topic} items in {server}")
            tools[tool.name] = tool
    return tools


def _context(key: str) -> ToolContext:
    return ToolContext(turn=TURN, call_id=key, idempotency_key=key)


def test_few_tools_are_all_offered() -> None:
    tools = dict(list(_tools().items())[:5])
    offer = Offer(tools, message="anything", limit=32)
    assert offer.names == list(tools)
    assert MORE_TOOLS not in offer.tools()


async def test_many_tools_offer_builtins_matches_and_more_tools() -> None:
    tools = _tools()
    offer = Offer(tools, message="open a github issue about the failing deploy", limit=8)
    assert offer.names[:2] == ["recall", "run_command"]
    assert "github__issue_tool" in offer.names
    assert offer.names[-1] == MORE_TOOLS
    assert len(offer.names) == 8
    assert "jira__invoice_tool" not in offer.names
    more = offer.tools()[MORE_TOOLS]
    from agent_core.tools.base import ToolContext as Context

    outcome = await more.run(
        {"query": "jira invoice"}, Context(turn=TURN, call_id="c1", idempotency_key="1:2")
    )
    assert "jira__invoice_tool" in outcome.output
    assert "jira__invoice_tool" in offer.names
    assert "jira__invoice_tool" in [s["function"]["name"] for s in offer.specs()]
    nothing = await more.run(
        {"query": "zzz"}, Context(turn=TURN, call_id="c2", idempotency_key="1:3")
    )
    assert nothing.output.startswith("No other tool")

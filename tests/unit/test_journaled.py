"""The stored seams read back as one type: journaled model calls and ``jobs`` listings,
including rows written by the release before they were typed."""

from __future__ import annotations

from agent_core.journaled import JobsListing, ModelCallOutput, RunItem, ScheduleItem, Spend
from agent_core.model import ToolCallRequest

# What loop.py journaled before the output had a type (the same keys).
OLD_ANSWER = {
    "role": "assistant",
    "text": "",
    "tool_calls": [{"id": "c1", "name": "http_request", "arguments": '{"url": "x"}'}],
    "model": "fake-model",
    "messages": 3,
    "context_tokens": {"system": 12, "current": 5},
    "prompt_tokens": 40,
    "completion_tokens": 7,
    "cost_usd": 0.0012,
}
OLD_FAILURE = {"role": "system", "text": "Sorry, the model could not be reached.", "error": "boom"}


def test_a_model_call_journaled_before_the_type_reads_back_whole() -> None:
    output = ModelCallOutput.from_json(OLD_ANSWER)
    assert output.tool_calls == (
        ToolCallRequest(id="c1", name="http_request", arguments='{"url": "x"}'),
    )
    assert output.context_tokens == {"system": 12, "current": 5}
    assert output.spend == Spend(
        model="fake-model", prompt_tokens=40, completion_tokens=7, cost_usd=0.0012
    )
    assert output.spend.tokens == 47
    assert output.error is None
    assert output.to_json() == OLD_ANSWER


def test_a_failed_call_keeps_its_error_and_costs_nothing() -> None:
    output = ModelCallOutput.from_json(OLD_FAILURE)
    assert output.role == "system"
    assert output.error == "boom"
    assert not output.spend.any
    assert ModelCallOutput.from_json(output.to_json()) == output


def test_an_entry_that_is_not_a_model_call_reads_as_a_failure() -> None:
    for value in ("text", 3, None, {"role": "wizard"}):
        output = ModelCallOutput.from_json(value)
        assert output.role == "system"
        assert output.error is not None
        assert output.error.startswith("unreadable journal entry")


def test_a_listing_round_trips_and_anything_else_is_no_listing() -> None:
    listing = JobsListing(
        jobs=(
            ScheduleItem(
                id="sc_00aa11bb",
                status="active",
                when="every day at 09:00",
                prompt="report",
                runs=(RunItem(job_id=4, status="done", receipt="1700.1"),),
            ),
        )
    )
    payload = listing.to_payload()
    assert payload["jobs"][0]["runs"][0]["receipt"] == "1700.1"
    assert JobsListing.from_payload(payload) == listing
    assert JobsListing.from_payload({"jobs": []}) == JobsListing()
    assert JobsListing.from_payload(None) is None
    assert JobsListing.from_payload({"other": 1}) is None
    assert JobsListing.from_payload({"jobs": "not a list"}) is None
    assert JobsListing.from_payload({"jobs": [{"status": "active"}]}) is None  # no id

"""``ask_user`` (issue #29): the model asks a question with a button per option, the turn
waits as it does for an approval, and the answer comes back as the tool's result. Through
the web API here, with the real litellm against the fake model; each chat platform's own
buttons are in ``test_questions_platforms.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fakes.model_server import FakeModelServer
from tests.scenario.conftest import ClientFactory
from tests.scenario.test_approvals_api import _items, _post, _until, tool_call
from tests.scenario.test_forget import _turn_ends, columns_holding

ASK = {"question": "Which environment?", "options": ["staging", "production"]}


def _tool_result(model_server: FakeModelServer, request: int) -> dict[str, Any]:
    message = model_server.requests[request]["messages"][-1]
    assert message["role"] == "tool", message
    result: dict[str, Any] = json.loads(message["content"])
    return result


async def test_a_press_answers_the_question_and_the_turn_goes_on_with_the_choice(
    make_client: ClientFactory, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """The question is an item with its options; a press by someone else is refused, a
    malformed press is a 400, a missing option a 404; the asker's press resumes the turn
    with that option, once; a second press is a 409."""
    model_server.script(tool_call("ask_user", ASK), "Deploying to production.")
    client = await make_client(model_server, CHATGATE_STATE_DIR=str(tmp_path / "state"))
    accepted = await _post(client, "deploy it")
    items = await _until(client, accepted["conversation_id"], "approval")
    question = next(i for i in items if i["role"] == "approval")["approval"]
    assert (question["kind"], question["question"], question["options"]) == (
        "question",
        "Which environment?",
        ["staging", "production"],
    )
    assert (question["status"], question["allow_other"]) == ("pending", False)
    url = f"/api/questions/{question['id']}"
    stranger = await client.post(url, json={"choice": 1, "user": "mallory"})
    assert stranger.status == 403
    assert "only they can answer it" in (await stranger.json())["error"]
    assert (await client.post(url, json={"choice": "maybe"})).status == 400
    for digit in ("²", "①", "-1", " 1"):  # digits to str.isdigit, not to int()
        assert (await client.post(url, json={"choice": digit})).status == 400
    assert (await client.post(url, json={"choice": 7})).status == 404
    assert (await client.post(url, json={"choice": "other"})).status == 404  # not offered
    assert (await client.post("/api/questions/ap_000000000000", json={"choice": 0})).status == 404
    # An approval's decision does not answer a question.
    assert (
        await client.post(f"/api/approvals/{question['id']}", json={"decision": "approve"})
    ).status == 404
    assert len(model_server.requests) == 1
    # Not the operator's to decide: the console's pending approvals leave it out.
    pending = await (await client.get("/api/console/approvals")).json()
    assert pending["items"] == []

    press = await client.post(url, json={"choice": 1})
    assert press.status == 200
    assert ((await press.json())["status"], (await press.json())["answer"]) == (
        "answered",
        "production",
    )
    again = await client.post(url, json={"choice": 0})
    assert again.status == 409
    items = await _until(client, accepted["conversation_id"], "assistant")
    assert items[-1]["text"] == "Deploying to production."
    assert _tool_result(model_server, 1) == {
        "answer": "production",
        "answered_by": "web:local",
        "typed": False,
    }
    assert any(
        i["role"] == "system" and i["text"] == "web:local answered: production" for i in items
    )
    assert len(model_server.requests) == 2


async def test_other_takes_the_next_message_as_the_answer(
    make_client: ClientFactory, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """ "Other" leaves the question open for the presser's next message, which answers it
    (no turn of its own: one model call more, not two), and later turns see it."""
    model_server.script(
        tool_call("ask_user", ASK | {"allow_other": True}), "Deploying to the canary.", "Sure."
    )
    client = await make_client(model_server, CHATGATE_STATE_DIR=str(tmp_path / "state"))
    accepted = await _post(client, "deploy it")
    items = await _until(client, accepted["conversation_id"], "approval")
    question = next(i for i in items if i["role"] == "approval")["approval"]
    other = await client.post(f"/api/questions/{question['id']}", json={"choice": "other"})
    assert other.status == 200
    body = await other.json()
    assert (body["status"], body["answering"]) == ("pending", "web:local")
    await _post(client, "the canary pool")
    items = await _until(client, accepted["conversation_id"], "assistant")
    assert items[-1]["text"] == "Deploying to the canary."
    assert _tool_result(model_server, 1) == {
        "answer": "the canary pool",
        "answered_by": "web:local",
        "typed": True,
    }
    assert len(model_server.requests) == 2
    # The next turn sees the typed answer as the person's words, after the question.
    await _post(client, "thanks")
    await _until(client, accepted["conversation_id"], "assistant", count=2)
    seen = [m.get("content") for m in model_server.requests[2]["messages"]]
    assert seen.index("deploy it") < seen.index("the canary pool") < seen.index("thanks")


async def test_a_question_nobody_answers_tells_the_model_so(
    make_client: ClientFactory, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """When the question's time is up the turn resumes with no answer, and says so."""
    model_server.script(tool_call("ask_user", ASK), "I will wait for you, then.")
    client = await make_client(
        model_server,
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        CHATGATE_APPROVAL_MINUTES="0.02",
    )
    accepted = await _post(client, "deploy it")
    items = await _until(client, accepted["conversation_id"], "assistant", timeout=30)
    assert items[-1]["text"] == "I will wait for you, then."
    result = _tool_result(model_server, 1)
    assert result["answer"] is None
    assert "nobody answered" in result["error"]
    question = next(
        i for i in await _items(client, accepted["conversation_id"]) if i["role"] == "approval"
    )
    assert question["approval"]["status"] == "expired"
    assert len(model_server.requests) == 2


async def test_stop_cancels_a_question_and_repeated_options_go_back_to_the_model(
    make_client: ClientFactory, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """Options that repeat are not put to anyone: the model is told and may ask again;
    ``/stop`` while a question waits cancels it, and the turn ends with no more calls."""
    model_server.script(
        tool_call("ask_user", {"question": "Which?", "options": ["a", " a"]}),
        tool_call("ask_user", ASK),
        "never sent",
    )
    client = await make_client(model_server, CHATGATE_STATE_DIR=str(tmp_path / "state"))
    accepted = await _post(client, "deploy it")
    items = await _until(client, accepted["conversation_id"], "approval")
    assert json.loads(model_server.requests[1]["messages"][-1]["content"]) == {
        "status": "invalid_arguments",
        "error": "options: two options are the same",
    }
    question = next(i for i in items if i["role"] == "approval")["approval"]
    assert question["options"] == ["staging", "production"]
    await _post(client, "/stop")
    items = await _until(client, accepted["conversation_id"], "system", count=2)
    question = next(i for i in items if i["role"] == "approval")["approval"]
    assert (question["status"], question["decided_by"]) == ("cancelled", "web:local")
    press = await client.post(f"/api/questions/{question['id']}", json={"choice": 0})
    assert press.status == 409
    turn = await _turn_ends(client, accepted["turn_id"], status="failed")
    assert turn["stopped_by"] == "web:local"
    assert len(model_server.requests) == 2


async def test_forgetting_a_person_erases_the_answer_they_typed(
    make_client: ClientFactory, model_server: FakeModelServer, tmp_path: Path, database_url: str
) -> None:
    """A typed answer is the person's words: erasing them leaves it nowhere."""
    model_server.script(tool_call("ask_user", ASK | {"allow_other": True}), "Noted.")
    client = await make_client(model_server, CHATGATE_STATE_DIR=str(tmp_path / "state"))
    accepted = await _post(client, "deploy it")
    items = await _until(client, accepted["conversation_id"], "approval")
    question = next(i for i in items if i["role"] == "approval")["approval"]
    await client.post(f"/api/questions/{question['id']}", json={"choice": "other"})
    await _post(client, "the zanzibar cluster")
    await _until(client, accepted["conversation_id"], "assistant")
    assert "approvals.answer" in columns_holding(database_url, "zanzibar")
    erased = await client.post(
        "/api/console/forget", json={"user": "web:local", "confirm": "web:local"}
    )
    assert erased.status == 200, await erased.text()
    assert columns_holding(database_url, "zanzibar") == []

"""The web adapter's pure parts: body parsing and who may use the web chat."""

from __future__ import annotations

import pytest

from adapters.base import BadRequest, Forbidden, Unauthorized
from adapters.web.auth import (
    check_local,
    check_same_origin,
    check_token,
    is_local_host,
    is_loopback,
    session_value,
)
from adapters.web.parse import parse_message


def test_a_message_body_becomes_an_inbound_event() -> None:
    """conversation -> channel, user -> web:<user>, id -> the ledger key."""
    event = parse_message({"conversation": " ops ", "text": "hi", "user": "ann", "id": "x1"})
    assert (event.platform, event.channel, event.user) == ("web", "ops", "web:ann")
    assert event.platform_event_id == "x1"
    assert parse_message({"conversation": "a", "text": "b"}).user == "web:local"


def test_without_an_id_every_post_is_a_new_event() -> None:
    """No client id: a fresh event id each time (nothing to dedupe on)."""
    body = {"conversation": "a", "text": "b"}
    assert parse_message(body).platform_event_id != parse_message(body).platform_event_id


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        "x",
        {},
        {"conversation": "a"},
        {"conversation": 1, "text": "b"},
        {"conversation": "a", "text": "   "},
        {"conversation": "a", "text": "b", "user": ""},
        {"conversation": "a", "text": "b", "id": 5},
    ],
)
def test_malformed_bodies_are_bad_requests(body: object) -> None:
    """Anything but the documented shape is a BadRequest with a reason."""
    with pytest.raises(BadRequest):
        parse_message(body)


@pytest.mark.parametrize(
    ("remote", "expected"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.5", False),
        ("192.168.1.2", False),
        ("2001:db8::1", False),
        (None, False),
        ("not-an-ip", False),
    ],
)
def test_loopback_detection(remote: str | None, expected: bool) -> None:
    """Only 127/8, ::1 and their mapped forms count as loopback."""
    assert is_loopback(remote) is expected


def test_without_a_token_only_loopback_may_use_the_web_chat() -> None:
    """A LAN client is refused (403) when CHATGATE_WEB_TOKEN is unset."""
    check_local(remote="127.0.0.1", host="127.0.0.1:8080", headers={})
    with pytest.raises(Forbidden):
        check_local(remote="192.168.1.20", host="h:1", headers={})


@pytest.mark.parametrize("header", ["Forwarded", "X-Forwarded-For", "X-Real-IP", "Via"])
def test_without_a_token_a_proxied_request_is_refused(header: str) -> None:
    """A proxy on this machine makes every client look local: its headers need a token."""
    with pytest.raises(Forbidden, match="proxy"):
        check_local(remote="127.0.0.1", host="localhost:8080", headers={header: "x"})


TOKEN = "0123456789abcdef-token"


def test_with_a_token_only_its_holder_may_use_the_web_chat() -> None:
    """With a token, loopback is not enough; the right bearer token or the session cookie
    derived from it is."""
    check_token(bearer=TOKEN, cookie=None, token=TOKEN)
    check_token(bearer=None, cookie=session_value(TOKEN), token=TOKEN)
    for bearer in (None, "", TOKEN[:-1], TOKEN + " "):
        with pytest.raises(Unauthorized):
            check_token(bearer=bearer, cookie=None, token=TOKEN)
    with pytest.raises(Unauthorized):
        check_token(bearer=None, cookie=TOKEN, token=TOKEN)  # the token itself is no cookie
    with pytest.raises(Unauthorized):
        check_token(bearer=None, cookie=session_value("another-token-0123"), token=TOKEN)


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1:8080", True),
        ("localhost:8080", True),
        ("localhost", True),
        ("[::1]:8080", True),
        ("app.localhost:1", True),
        ("evil.example:8080", False),
        ("10.0.0.1:8080", False),
        (None, False),
    ],
)
def test_local_host_names(host: str | None, expected: bool) -> None:
    """Only names of this machine pass as Host without a token."""
    assert is_local_host(host) is expected


def test_a_rebound_domain_is_refused_without_a_token() -> None:
    """DNS rebinding: loopback peer, foreign Host header -> 403."""
    with pytest.raises(Forbidden):
        check_local(remote="127.0.0.1", host="evil.example:8080", headers={})


def test_cross_origin_writes_are_refused() -> None:
    """A POST whose Origin is another site is refused; same origin or none passes."""
    check_same_origin(origin=None, host="127.0.0.1:8080")
    check_same_origin(origin="http://127.0.0.1:8080", host="127.0.0.1:8080")
    with pytest.raises(Forbidden):
        check_same_origin(origin="https://evil.example", host="127.0.0.1:8080")

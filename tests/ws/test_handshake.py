"""The opening handshake's decisions, sans-IO (``oxiedge.ws.handshake``)."""

from __future__ import annotations

import pytest

from oxiedge.ws.handshake import Accept, Refusal, accept_token, decide

KEY = "dGhlIHNhbXBsZSBub25jZQ=="  # RFC 6455 1.3's example nonce
GOOD = {"upgrade": "websocket", "connection": "keep-alive, Upgrade",
        "sec-websocket-version": "13", "sec-websocket-key": KEY,
        "sec-websocket-protocol": "mqtt"}


def test_accept_token_is_rfc_6455s_example() -> None:
    assert accept_token(KEY) == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_accepted_upgrade_names_mqtt() -> None:
    answer = decide("GET", GOOD)
    assert isinstance(answer, Accept)
    assert answer.subprotocol == "mqtt"
    assert dict(answer.headers)["sec-websocket-accept"] == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


@pytest.mark.parametrize(("offered", "chosen"), [
    ("mqtt", "mqtt"), ("mqttv3.1", "mqttv3.1"), ("chat, mqttv3.1, mqtt", "mqttv3.1"),
    (None, None)])
def test_subprotocol_choice(offered: str | None, chosen: str | None) -> None:
    headers = {k: v for k, v in GOOD.items() if k != "sec-websocket-protocol"}
    if offered is not None:
        headers["sec-websocket-protocol"] = offered
    answer = decide("GET", headers)
    assert isinstance(answer, Accept) and answer.subprotocol == chosen


@pytest.mark.parametrize(("method", "change", "status"), [
    ("POST", {}, 400),
    ("GET", {"upgrade": None}, 426),
    ("GET", {"connection": "keep-alive"}, 426),
    ("GET", {"sec-websocket-version": "8"}, 426),
    ("GET", {"sec-websocket-key": None}, 400),
    ("GET", {"sec-websocket-key": "not base64!"}, 400),
    ("GET", {"sec-websocket-key": "c2hvcnQ="}, 400),  # 5 bytes, not 16
    ("GET", {"sec-websocket-protocol": "chat, wamp"}, 400),
])
def test_refusals(method: str, change: dict[str, str | None], status: int) -> None:
    headers = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    answer = decide(method, headers)
    assert isinstance(answer, Refusal) and answer.status == status

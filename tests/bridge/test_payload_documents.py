"""Every MQTT payload becomes a storable document (no payload may break the ingest path)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from oxiedge.bridge.ingest import payload_document
from oxiedge.store.encoding import decode_doc, encode_doc


def _doc(payload: bytes) -> dict:  # type: ignore[type-arg]
    return payload_document("s/t", payload, 7)


def test_shapes() -> None:
    assert _doc(b'{"value": 26.5}') == {"value": 26.5, "_topic": "s/t", "_received_at": 7}
    assert _doc(b"61")["payload"] == 61
    assert _doc(b'"on"')["payload"] == "on"
    assert _doc(b"hello")["payload"] == "hello"
    assert _doc(b"\xff\xfe") == {"payload": "//4=", "_payload_encoding": "base64",
                                 "_topic": "s/t", "_received_at": 7}
    assert _doc(b'{"_id": 5, "_version": 9, "x": 1}') == {"x": 1, "_topic": "s/t",
                                                          "_received_at": 7}


def test_unstorable_json_stays_text() -> None:
    for payload in (b"NaN", b"[Infinity]", b"[" * 5000):
        assert _doc(payload)["payload"] == payload.decode()


@given(st.binary(max_size=300))
def test_any_payload_is_storable(payload: bytes) -> None:
    doc = _doc(payload)
    assert decode_doc(1, encode_doc(doc))["_topic"] == "s/t"

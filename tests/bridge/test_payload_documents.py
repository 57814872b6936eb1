"""Every MQTT payload becomes a storable document (no payload may break the ingest path)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from oxiedge.ingest.documents import fallback_document, payload_document
from oxiedge.store.encoding import decode_doc, encode_doc
from oxiedge.topicmap import routing_key_to_mqtt


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


def test_json_deeper_than_the_encoder_writes_is_refused_by_it() -> None:
    # orjson reads 1024 levels but writes 254: the parsed document cannot be stored as is.
    for payload in (b"[" * 300 + b"]" * 300, b'{"a":' * 300 + b"1" + b"}" * 300):
        doc = _doc(payload)
        try:
            encode_doc(doc)
        except ValueError:
            continue
        raise AssertionError("the encoder took a document nested 300 deep")


def test_fallback_shapes() -> None:
    deep = b"[" * 300 + b"]" * 300
    doc = fallback_document("s/t", deep, 7, "too deep")
    assert doc == {"payload": deep.decode(), "_topic": "s/t", "_received_at": 7,
                   "_ingest_fallback": "too deep"}
    raw = fallback_document("s/t", b"\xff\x00", 7, "x")
    assert raw["payload"] == "/wA=" and raw["_payload_encoding"] == "base64"
    # A topic strict UTF-8 cannot hold (an AMQP routing key is decoded leniently).
    odd = fallback_document("s/\udcff", b"1", 7, "x")
    assert odd["_topic"] == "s/?"


@given(st.binary(max_size=300), st.text(max_size=20), st.text(max_size=50))
def test_the_fallback_is_always_storable(payload: bytes, topic: str, reason: str) -> None:
    doc = fallback_document(topic, payload, 7, reason)
    assert decode_doc(1, encode_doc(doc))["_ingest_fallback"] == reason


def test_routing_keys_that_are_not_utf8_have_no_mqtt_topic() -> None:
    # MQTT-1.5.3-1: a topic is UTF-8; the AMQP side decodes such bytes as surrogates.
    assert routing_key_to_mqtt("s.\udcff") is None
    assert routing_key_to_mqtt("s.ü") == "s/ü"

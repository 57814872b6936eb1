"""MQTT 5 properties: a byte vector for every property, and the faults the spec names."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiedge.mqtt.bodies import MalformedPacket, ProtocolError, ProtocolViolation
from oxiedge.mqtt.packets import PacketType as T
from oxiedge.mqtt.properties import (
    NO_PROPERTIES,
    SPECS,
    WILL,
    Properties,
    allowed_in,
    decode_properties,
    encode_properties,
    encode_varint,
    read_varint,
)
from tests.mqtt.test_codec5 import properties as properties_in

# (context, properties, exact bytes of the block, length first), hand-assembled from 2.2.2
# and table 2-4: every identifier at least once.
VECTORS: list[tuple[int, Properties, bytes]] = [
    (T.PUBLISH, Properties(payload_format_indicator=1), b"\x02\x01\x01"),
    (WILL, Properties(message_expiry_interval=300), b"\x05\x02\x00\x00\x01\x2c"),
    (T.PUBLISH, Properties(content_type="json"), b"\x07\x03\x00\x04json"),
    (T.PUBLISH, Properties(response_topic="r/t"), b"\x06\x08\x00\x03r/t"),
    (WILL, Properties(correlation_data=b"\x01\x02"), b"\x05\x09\x00\x02\x01\x02"),
    (T.SUBSCRIBE, Properties(subscription_identifiers=(1,)), b"\x02\x0b\x01"),
    (T.SUBSCRIBE, Properties(subscription_identifiers=(268_435_455,)),
     b"\x05\x0b\xff\xff\xff\x7f"),
    (T.PUBLISH, Properties(subscription_identifiers=(1, 128)), b"\x05\x0b\x01\x0b\x80\x01"),
    (T.CONNECT, Properties(session_expiry_interval=0xFFFFFFFF), b"\x05\x11\xff\xff\xff\xff"),
    (T.CONNACK, Properties(assigned_client_identifier="id"), b"\x05\x12\x00\x02id"),
    (T.CONNACK, Properties(server_keep_alive=30), b"\x03\x13\x00\x1e"),
    (T.AUTH, Properties(authentication_method="SCRAM"), b"\x08\x15\x00\x05SCRAM"),
    (T.CONNECT, Properties(authentication_method="m", authentication_data=b"d"),
     b"\x08\x15\x00\x01m\x16\x00\x01d"),
    (T.CONNECT, Properties(request_problem_information=0), b"\x02\x17\x00"),
    (WILL, Properties(will_delay_interval=10), b"\x05\x18\x00\x00\x00\x0a"),
    (T.CONNECT, Properties(request_response_information=1), b"\x02\x19\x01"),
    (T.CONNACK, Properties(response_information="r"), b"\x04\x1a\x00\x01r"),
    (T.DISCONNECT, Properties(server_reference="s"), b"\x04\x1c\x00\x01s"),
    (T.PUBACK, Properties(reason_string="no"), b"\x05\x1f\x00\x02no"),
    (T.CONNECT, Properties(receive_maximum=20), b"\x03\x21\x00\x14"),
    (T.CONNACK, Properties(topic_alias_maximum=10), b"\x03\x22\x00\x0a"),
    (T.PUBLISH, Properties(topic_alias=1), b"\x03\x23\x00\x01"),
    (T.CONNACK, Properties(maximum_qos=1), b"\x02\x24\x01"),
    (T.CONNACK, Properties(retain_available=0), b"\x02\x25\x00"),
    # order and duplicates kept (3.3.2.3.7)
    (T.UNSUBSCRIBE, Properties(user_properties=(("a", "1"), ("a", "1"), ("0", ""))),
     b"\x14\x26\x00\x01a\x00\x011\x26\x00\x01a\x00\x011\x26\x00\x010\x00\x00"),
    (T.CONNECT, Properties(maximum_packet_size=1024), b"\x05\x27\x00\x00\x04\x00"),
    (T.CONNACK, Properties(wildcard_subscription_available=1), b"\x02\x28\x01"),
    (T.CONNACK, Properties(subscription_identifier_available=0), b"\x02\x29\x00"),
    (T.CONNACK, Properties(shared_subscription_available=1), b"\x02\x2a\x01"),
    (T.PUBLISH, NO_PROPERTIES, b"\x00"),
    # several at once: in identifier order
    (T.PUBLISH, Properties(payload_format_indicator=0, topic_alias=3, subscription_identifiers=(9,),
                           user_properties=(("k", "v"),)),
     b"\x0e\x01\x00\x0b\x09\x23\x00\x03\x26\x00\x01k\x00\x01v"),
]


@pytest.mark.parametrize(("context", "props", "raw"), VECTORS)
def test_property_vectors(context: int, props: Properties, raw: bytes) -> None:
    assert encode_properties(props, context) == raw
    assert decode_properties(b"xx" + raw + b"payload", 2, context) == (props, 2 + len(raw))


def test_every_property_has_a_vector() -> None:
    seen = {raw[i] for _, _, raw in VECTORS for i in range(1, len(raw)) if raw[i] in SPECS}
    assert set(SPECS) <= seen
    assert len(SPECS) == 27


def test_no_properties_costs_nothing() -> None:
    props, off = decode_properties(b"\x00", 0, T.PUBLISH)
    assert props is NO_PROPERTIES and off == 1
    props, off = decode_properties(b"\x80\x00", 0, T.PUBLISH)  # padded length 0
    assert props == NO_PROPERTIES and off == 2


def test_allowed_in_follows_table_2_4() -> None:
    assert allowed_in(0x18, WILL) and not allowed_in(0x18, T.PUBLISH)
    assert allowed_in(0x23, T.PUBLISH) and not allowed_in(0x23, WILL)
    assert allowed_in(0x0B, T.SUBSCRIBE) and not allowed_in(0x0B, WILL)
    assert all(allowed_in(0x26, t) for t in (WILL, *range(1, 12), 14, 15) if t not in (0,))
    assert not allowed_in(0x26, T.PINGREQ)
    assert not allowed_in(0x1F, T.PUBLISH) and allowed_in(0x1F, T.AUTH)
    assert not allowed_in(0x04, T.PUBLISH)  # unassigned identifier


FAULTS: dict[str, tuple[int, bytes, type[ProtocolError]]] = {
    # an identifier the packet may not carry: a Malformed Packet (2.2.2.2)
    "topic alias in CONNECT": (T.CONNECT, b"\x03\x23\x00\x01", MalformedPacket),
    "will delay in PUBLISH": (T.PUBLISH, b"\x05\x18\x00\x00\x00\x01", MalformedPacket),
    "subscription id in will": (WILL, b"\x02\x0b\x01", MalformedPacket),
    "reason string in PUBLISH": (T.PUBLISH, b"\x04\x1f\x00\x01r", MalformedPacket),
    "session expiry in SUBSCRIBE": (T.SUBSCRIBE, b"\x05\x11\x00\x00\x00\x01", MalformedPacket),
    "user property in PINGREQ": (T.PINGREQ, b"\x07\x26\x00\x01a\x00\x01b", MalformedPacket),
    "unknown identifier 0x00": (T.PUBLISH, b"\x02\x00\x00", MalformedPacket),
    "unknown identifier 0x2b": (T.CONNACK, b"\x02\x2b\x00", MalformedPacket),
    "identifier 0x80 (two-byte varint)": (T.PUBLISH, b"\x03\x80\x01\x00", MalformedPacket),
    # truncations
    "length past the packet": (T.PUBLISH, b"\x05\x02\x00\x00", MalformedPacket),
    "four-byte value cut by length": (T.PUBLISH, b"\x03\x02\x00\x00\x00\x01", MalformedPacket),
    "two-byte value cut": (T.PUBLISH, b"\x02\x23\x00", MalformedPacket),
    "byte value missing": (T.PUBLISH, b"\x01\x01", MalformedPacket),
    "string cut": (T.PUBLISH, b"\x05\x03\x00\x05ab", MalformedPacket),
    "string length cut": (T.PUBLISH, b"\x02\x03\x00", MalformedPacket),
    "user property value missing": (T.PUBLISH, b"\x04\x26\x00\x01a", MalformedPacket),
    "varint value cut": (T.PUBLISH, b"\x02\x0b\x80", MalformedPacket),
    "length varint cut": (T.PUBLISH, b"\x80", MalformedPacket),
    # data types
    "bad UTF-8": (T.PUBLISH, b"\x05\x03\x00\x02\xc3\x28", MalformedPacket),
    "surrogate in UTF-8": (T.PUBLISH, b"\x06\x03\x00\x03\xed\xa0\x80", MalformedPacket),
    "U+0000 in a string": (T.PUBLISH, b"\x05\x03\x00\x02a\x00", MalformedPacket),
    "bad UTF-8 in a user property key": (T.PUBLISH, b"\x07\x26\x00\x01\xff\x00\x01v",
                                         MalformedPacket),
    "length varint over 4 bytes": (T.PUBLISH, b"\xff\xff\xff\xff\x01", MalformedPacket),
    "value varint over 4 bytes": (T.PUBLISH, b"\x06\x0b\x80\x80\x80\x80\x01", MalformedPacket),
    # rules: Protocol Errors
    "message expiry twice": (T.PUBLISH, b"\x0a\x02\x00\x00\x00\x01\x02\x00\x00\x00\x01",
                             ProtocolViolation),
    "content type twice": (WILL, b"\x08\x03\x00\x01a\x03\x00\x01b",
                           ProtocolViolation),
    "reason string twice": (T.PUBACK, b"\x08\x1f\x00\x01a\x1f\x00\x01a", ProtocolViolation),
    "subscription id twice in SUBSCRIBE": (T.SUBSCRIBE, b"\x04\x0b\x01\x0b\x02",
                                           ProtocolViolation),
    "subscription id 0": (T.PUBLISH, b"\x02\x0b\x00", ProtocolViolation),
    "subscription id 0 in SUBSCRIBE": (T.SUBSCRIBE, b"\x02\x0b\x00", ProtocolViolation),
    "receive maximum 0": (T.CONNECT, b"\x03\x21\x00\x00", ProtocolViolation),
    "maximum packet size 0": (T.CONNACK, b"\x05\x27\x00\x00\x00\x00", ProtocolViolation),
    "request problem information 2": (T.CONNECT, b"\x02\x17\x02", ProtocolViolation),
    "request response information 2": (T.CONNECT, b"\x02\x19\x02", ProtocolViolation),
    "maximum qos 2": (T.CONNACK, b"\x02\x24\x02", ProtocolViolation),
    "retain available 2": (T.CONNACK, b"\x02\x25\x02", ProtocolViolation),
    "shared subscription available 9": (T.CONNACK, b"\x02\x2a\x09", ProtocolViolation),
    "authentication data without method": (T.CONNECT, b"\x04\x16\x00\x01x",
                                           ProtocolViolation),
}


@pytest.mark.parametrize(("context", "raw", "error"), FAULTS.values(), ids=FAULTS.keys())
def test_property_faults(context: int, raw: bytes, error: type[ProtocolError]) -> None:
    with pytest.raises(error) as info:
        decode_properties(raw, 0, context)
    assert type(info.value) is error
    assert info.value.reason_code == (0x81 if error is MalformedPacket else 0x82)


def test_user_properties_repeat_everywhere() -> None:
    raw = b"\x0e\x26\x00\x01a\x00\x01b\x26\x00\x01a\x00\x01b"
    props, _ = decode_properties(raw, 0, T.DISCONNECT)
    assert props.user_properties == (("a", "b"), ("a", "b"))


@pytest.mark.parametrize(("value", "raw"), [
    (0, b"\x00"), (127, b"\x7f"), (128, b"\x80\x01"), (16_383, b"\xff\x7f"),
    (16_384, b"\x80\x80\x01"), (2_097_151, b"\xff\xff\x7f"), (2_097_152, b"\x80\x80\x80\x01"),
    (268_435_455, b"\xff\xff\xff\x7f"),
])  # fmt: skip
def test_variable_byte_integer(value: int, raw: bytes) -> None:
    """The boundaries of table 1-1 (1.5.5)."""
    assert encode_varint(value) == raw
    assert read_varint(raw, 0, len(raw)) == (value, len(raw))


@pytest.mark.parametrize(("context", "props"), [
    (T.CONNECT, Properties(topic_alias=1)),
    (T.PUBLISH, Properties(will_delay_interval=1)),
    (T.SUBSCRIBE, Properties(subscription_identifiers=(1, 2))),
    (T.PUBLISH, Properties(subscription_identifiers=(0,))),
    (T.PINGREQ, Properties(user_properties=(("a", "b"),))),
    (T.CONNECT, Properties(receive_maximum=65_536)),
    (T.PUBLISH, Properties(message_expiry_interval=-1)),
    (T.PUBLISH, Properties(content_type="x" * 65_536)),
])  # fmt: skip
def test_encode_refuses_what_the_packet_cannot_carry(context: int, props: Properties) -> None:
    with pytest.raises(ValueError):
        encode_properties(props, context)


_CONTEXTS = [WILL, *(int(t) for t in T)]


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(_CONTEXTS), st.binary(max_size=60))
def test_any_block_decodes_or_raises_protocol_error(context: int, raw: bytes) -> None:
    try:
        props, off = decode_properties(raw, 0, context)
    except ProtocolError:
        return
    assert off <= len(raw)
    # what decoded encodes back to the same values (not necessarily the same bytes)
    assert decode_properties(encode_properties(props, context), 0, context)[0] == props


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_round_trip_in_every_context(data: st.DataObject) -> None:
    context = data.draw(st.sampled_from(_CONTEXTS))
    props = data.draw(properties_in(context))
    raw = encode_properties(props, context)
    assert decode_properties(raw, 0, context) == (props, len(raw))

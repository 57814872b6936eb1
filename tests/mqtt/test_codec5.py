"""MQTT 5 codec: byte vectors for every packet, hypothesis round-trips, faults and garbage."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiedge.mqtt.bodies import MalformedPacket, ProtocolError, ProtocolViolation
from oxiedge.mqtt.codec import Decoder, decode_all
from oxiedge.mqtt.codec5 import Decoder5, decode_all5
from oxiedge.mqtt.encode5 import encode5, encode_puback5, encode_publish5
from oxiedge.mqtt.packets import Connect, PacketType, Pingreq, Pingresp
from oxiedge.mqtt.packets5 import (
    Auth,
    Connack5,
    Connect5,
    Disconnect5,
    Packet5,
    Puback5,
    Pubcomp5,
    Publish5,
    Pubrec5,
    Pubrel5,
    Suback5,
    Subscribe5,
    Subscription,
    Unsuback5,
    Unsubscribe5,
    Will5,
)
from oxiedge.mqtt.properties import NO_PROPERTIES, SPECS, WILL, Properties
from oxiedge.mqtt.reasons import VALID_REASONS, ReasonCode, reason_name
from tests.mqtt.test_codec import pids, text, topic_filters, topic_names

P = Properties

# (packet, exact bytes) for every MQTT 5 packet type, hand-assembled from chapter 3's figures.
VECTORS: list[tuple[Packet5, bytes]] = [
    (Connect5("c1", keep_alive=60), b"\x10\x0f\x00\x04MQTT\x05\x02\x00\x3c\x00\x00\x02c1"),
    (Connect5("c", clean_start=False, keep_alive=10, username="u", password=b"p",
              will=Will5("w", b"x", qos=1, retain=True, properties=P(will_delay_interval=5)),
              properties=P(session_expiry_interval=60, receive_maximum=10)),
     b"\x10\x28\x00\x04MQTT\x05\xec\x00\x0a\x08\x11\x00\x00\x00\x3c\x21\x00\x0a\x00\x01c"
     b"\x05\x18\x00\x00\x00\x05\x00\x01w\x00\x01x\x00\x01u\x00\x01p"),
    # a password without a user name is allowed in MQTT 5 (3.1.2.9)
    (Connect5("c", password=b"p"), b"\x10\x11\x00\x04MQTT\x05\x42\x00\x00\x00\x00\x01c\x00\x01p"),
    (Connack5(0, True), b"\x20\x03\x01\x00\x00"),
    (Connack5(ReasonCode.BAD_USER_NAME_OR_PASSWORD), b"\x20\x03\x00\x86\x00"),
    (Connack5(0, False, P(receive_maximum=20, topic_alias_maximum=5)),
     b"\x20\x09\x00\x00\x06\x21\x00\x14\x22\x00\x05"),
    (Publish5("a/b", b"hi"), b"\x30\x08\x00\x03a/b\x00hi"),
    (Publish5("a/b", b"x", qos=1, packet_id=10, properties=P(content_type="t")),
     b"\x32\x0d\x00\x03a/b\x00\x0a\x04\x03\x00\x01tx"),
    (Publish5("", b"", properties=P(topic_alias=1)), b"\x30\x06\x00\x00\x03\x23\x00\x01"),
    (Publish5("a", b"", qos=2, retain=True, dup=True, packet_id=0x1234,
              properties=P(subscription_identifiers=(1, 2))),
     b"\x3d\x0a\x00\x01a\x12\x34\x04\x0b\x01\x0b\x02"),
    (Puback5(1), b"\x40\x02\x00\x01"),
    (Puback5(1, ReasonCode.NO_MATCHING_SUBSCRIBERS), b"\x40\x03\x00\x01\x10"),
    (Puback5(1, ReasonCode.NOT_AUTHORIZED, P(reason_string="no")),
     b"\x40\x09\x00\x01\x87\x05\x1f\x00\x02no"),
    (Pubrec5(2, ReasonCode.QUOTA_EXCEEDED), b"\x50\x03\x00\x02\x97"),
    (Pubrel5(3), b"\x62\x02\x00\x03"),
    (Pubrel5(3, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND), b"\x62\x03\x00\x03\x92"),
    (Pubcomp5(4, 0, P(user_properties=(("a", "b"),))),
     b"\x70\x0b\x00\x04\x00\x07\x26\x00\x01a\x00\x01b"),
    (Subscribe5(7, (Subscription("a/+", 1, no_local=True, retain_as_published=True,
                                 retain_handling=2), Subscription("#")),
                P(subscription_identifiers=(5,))),
     b"\x82\x0f\x00\x07\x02\x0b\x05\x00\x03a/+\x2d\x00\x01#\x00"),
    (Suback5(7, (1, 0x80, ReasonCode.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED)),
     b"\x90\x06\x00\x07\x00\x01\x80\xa2"),
    (Unsubscribe5(8, ("a/+",)), b"\xa2\x08\x00\x08\x00\x00\x03a/+"),
    (Unsuback5(8, (0, ReasonCode.NO_SUBSCRIPTION_EXISTED)), b"\xb0\x05\x00\x08\x00\x00\x11"),
    (Pingreq(), b"\xc0\x00"),
    (Pingresp(), b"\xd0\x00"),
    (Disconnect5(), b"\xe0\x00"),
    (Disconnect5(ReasonCode.SESSION_TAKEN_OVER), b"\xe0\x01\x8e"),
    (Disconnect5(ReasonCode.DISCONNECT_WITH_WILL_MESSAGE, P(session_expiry_interval=0)),
     b"\xe0\x07\x04\x05\x11\x00\x00\x00\x00"),
    (Auth(), b"\xf0\x00"),
    (Auth(ReasonCode.CONTINUE_AUTHENTICATION,
          P(authentication_method="X", authentication_data=b"d")),
     b"\xf0\x0a\x18\x08\x15\x00\x01X\x16\x00\x01d"),
]


@pytest.mark.parametrize(("packet", "raw"), VECTORS, ids=[type(p).__name__ for p, _ in VECTORS])
def test_byte_vectors(packet: Packet5, raw: bytes) -> None:
    assert encode5(packet) == raw
    assert decode_all5(raw) == [packet]


def test_every_packet_type_has_a_vector() -> None:
    assert {type(p) for p, _ in VECTORS} == {
        Connect5, Connack5, Publish5, Puback5, Pubrec5, Pubrel5, Pubcomp5, Subscribe5, Suback5,
        Unsubscribe5, Unsuback5, Pingreq, Pingresp, Disconnect5, Auth}  # fmt: skip


SHORT_FORMS: list[tuple[bytes, Packet5]] = [
    # what a peer may send in longer form than our encoder does
    (b"\x40\x03\x00\x01\x00", Puback5(1)),  # reason 0, no property length (3.4.2.1)
    (b"\x40\x04\x00\x01\x00\x00", Puback5(1)),  # reason 0, property length 0
    (b"\x50\x04\x00\x01\x10\x00", Pubrec5(1, 0x10)),
    (b"\x62\x04\x00\x01\x92\x00", Pubrel5(1, 0x92)),
    (b"\xe0\x02\x00\x00", Disconnect5()),
    (b"\xe0\x01\x00", Disconnect5()),
    (b"\x20\x04\x00\x00\x80\x00", Connack5()),  # property length 0 padded to 2 bytes
]


@pytest.mark.parametrize(("raw", "packet"), SHORT_FORMS)
def test_short_and_long_forms_decode_alike(raw: bytes, packet: Packet5) -> None:
    assert decode_all5(raw) == [packet]


def test_reason_table() -> None:
    assert reason_name(PacketType.DISCONNECT, 0) == "Normal disconnection"
    assert reason_name(PacketType.SUBACK, 0) == "Granted QoS 0"
    assert reason_name(PacketType.PUBACK, 0x10) == "No matching subscribers"
    assert reason_name(PacketType.PUBACK, 0x8E) == "reason code 0x8e"
    assert ReasonCode(0x97).name == "QUOTA_EXCEEDED"
    assert VALID_REASONS[PacketType.PUBREL] == {0x00, 0x92}
    assert VALID_REASONS[PacketType.AUTH] == {0x00, 0x18, 0x19}
    assert 0x10 in VALID_REASONS[PacketType.PUBREC]
    assert 0x10 not in VALID_REASONS[PacketType.PUBCOMP]


# ------------------------------------------------------------------------ the decoder


def _decoder(raw: bytes) -> Decoder5:
    dec = Decoder5()
    dec.feed(raw)
    return dec


def test_next_connect_decodes_by_level() -> None:
    v5 = encode5(Connect5("c1", keep_alive=60))
    assert _decoder(v5).next_connect() == Connect5("c1", keep_alive=60)
    v4 = b"\x10\x0e\x00\x04MQTT\x04\x02\x00\x3c\x00\x02c1"
    assert _decoder(v4).next_connect() == Connect("c1", keep_alive=60)
    # The 3.1.1 decoder keeps answering a level-5 CONNECT with just its level (CONNACK 1).
    [old] = decode_all(v5)
    assert isinstance(old, Connect) and old.protocol_level == 5
    dec = _decoder(b"\xc0\x00")
    with pytest.raises(ProtocolViolation, match="first packet"):
        dec.next_connect()
    with pytest.raises(ProtocolError):  # stays failed
        dec.next_connect()
    assert _decoder(v5[:-1]).next_connect() is None


def test_next_item5_publish_tuple_and_puback_id() -> None:
    raw = encode_publish5(b"a/b", b"hello")
    assert _decoder(raw).next_item5() == ("a/b", b"a/b", 0, False, False, None, b"hello", raw,
                                          NO_PROPERTIES)  # fmt: skip
    with_props = encode5(Publish5("a/b", b"x", properties=P(user_properties=(("k", "v"),))))
    item = _decoder(with_props).next_item5()
    assert isinstance(item, tuple) and item[7] == with_props and item[8].user_properties
    aliased = encode5(Publish5("a/b", b"x", properties=P(topic_alias=2)))
    item = _decoder(aliased).next_item5()
    assert isinstance(item, tuple) and item[7] is None  # an alias is never forwarded
    assert _decoder(encode_puback5(9)).next_item5() == 9
    assert _decoder(encode_puback5(9, 0x10)).next_item5() == Puback5(9, 0x10)
    assert _decoder(encode_puback5(9)).next_packet5() == Puback5(9)


def test_auth_is_a_reserved_type_in_mqtt_311() -> None:
    with pytest.raises(ProtocolError):
        decode_all(b"\xf0\x00")
    assert decode_all5(b"\xf0\x00") == [Auth()]


def test_feeding_byte_by_byte() -> None:
    stream = b"".join(raw for _, raw in VECTORS)
    dec = Decoder5()
    out: list[object] = []
    for i in range(len(stream)):
        dec.feed(stream[i : i + 1])
        while (p := dec.next_packet5()) is not None:
            out.append(p)
    assert out == [p for p, _ in VECTORS]


MALFORMED: dict[str, tuple[bytes, type[ProtocolError]]] = {
    "reserved type 0": (b"\x00\x00", MalformedPacket),
    "auth flags": (b"\xf1\x00", MalformedPacket),
    "pubrel flags 0": (b"\x60\x02\x00\x01", MalformedPacket),
    "remaining length over 4 bytes": (b"\x30\xff\xff\xff\xff\x01", MalformedPacket),
    "publish qos 3": (b"\x36\x06\x00\x01t\x00\x01\x00", MalformedPacket),
    "publish dup on qos 0": (b"\x38\x04\x00\x01t\x00", MalformedPacket),
    "publish packet id 0": (b"\x32\x06\x00\x01t\x00\x00\x00", MalformedPacket),
    "publish no property length": (b"\x30\x03\x00\x01t", MalformedPacket),
    "publish empty topic no alias": (b"\x30\x03\x00\x00\x00", ProtocolViolation),
    "publish session expiry": (b"\x30\x09\x00\x01t\x05\x11\x00\x00\x00\x01", MalformedPacket),
    "publish message expiry twice": (
        b"\x30\x0e\x00\x01t\x0a\x02\x00\x00\x00\x01\x02\x00\x00\x00\x02", ProtocolViolation),
    "publish truncated property": (b"\x30\x07\x00\x01t\x05\x02\x00\x00", MalformedPacket),
    "publish bad utf8 content type": (b"\x30\x09\x00\x01t\x05\x03\x00\x02\xc3\x28",
                                      MalformedPacket),
    "publish bad utf8 topic": (b"\x30\x05\x00\x02\xc3\x28\x00", ProtocolError),
    "publish property length over 4 bytes": (b"\x30\x08\x00\x01t\xff\xff\xff\xff\x01",
                                             MalformedPacket),
    "publish subscription id 0": (b"\x30\x06\x00\x01t\x02\x0b\x00", ProtocolViolation),
    "publish wildcard topic": (b"\x30\x04\x00\x01#\x00", ProtocolError),
    "puback bad reason": (b"\x40\x03\x00\x01\x05", ProtocolViolation),
    "puback id 0": (b"\x40\x02\x00\x00", MalformedPacket),
    "puback bytes after properties": (b"\x40\x05\x00\x01\x00\x00\x00", MalformedPacket),
    "pubrel reason 0x10": (b"\x62\x03\x00\x01\x10", ProtocolViolation),
    "puback will delay": (b"\x40\x09\x00\x01\x00\x05\x18\x00\x00\x00\x01", MalformedPacket),
    "connack session present with error": (b"\x20\x03\x01\x86\x00", ProtocolViolation),
    "connack reserved flags": (b"\x20\x03\x02\x00\x00", MalformedPacket),
    "connack too short": (b"\x20\x02\x00\x00", MalformedPacket),
    "connack reason 0x10": (b"\x20\x03\x00\x10\x00", ProtocolViolation),
    "connect reserved flag": (b"\x10\x0d\x00\x04MQTT\x05\x03\x00\x3c\x00\x00\x00",
                              MalformedPacket),
    "connect will qos 3": (b"\x10\x13\x00\x04MQTT\x05\x1e\x00\x3c\x00\x00\x00\x00\x00\x01t"
                           b"\x00\x00", MalformedPacket),
    "connect will qos no will": (b"\x10\x0d\x00\x04MQTT\x05\x0a\x00\x3c\x00\x00\x00",
                                 MalformedPacket),
    "connect topic alias": (b"\x10\x10\x00\x04MQTT\x05\x02\x00\x3c\x03\x23\x00\x01\x00\x00",
                            MalformedPacket),
    "connect receive maximum 0": (
        b"\x10\x10\x00\x04MQTT\x05\x02\x00\x3c\x03\x21\x00\x00\x00\x00", ProtocolViolation),
    "connect auth data no method": (
        b"\x10\x11\x00\x04MQTT\x05\x02\x00\x3c\x04\x16\x00\x01x\x00\x00", ProtocolViolation),
    "connect will topic alias": (
        b"\x10\x16\x00\x04MQTT\x05\x06\x00\x3c\x00\x00\x00\x03\x23\x00\x01\x00\x01t\x00\x00",
        MalformedPacket),
    "connect trailing byte": (b"\x10\x0e\x00\x04MQTT\x05\x02\x00\x3c\x00\x00\x00\x00",
                              MalformedPacket),
    "connect truncated": (b"\x10\x09\x00\x04MQTT\x05\x02\x00", MalformedPacket),
    "subscribe reserved option bits": (b"\x82\x07\x00\x01\x00\x00\x01a\x40", MalformedPacket),
    "subscribe qos 3": (b"\x82\x07\x00\x01\x00\x00\x01a\x03", ProtocolViolation),
    "subscribe retain handling 3": (b"\x82\x07\x00\x01\x00\x00\x01a\x30", ProtocolViolation),
    "subscribe two subscription ids": (
        b"\x82\x0b\x00\x01\x04\x0b\x01\x0b\x02\x00\x01a\x00", ProtocolViolation),
    "subscribe no filters": (b"\x82\x03\x00\x01\x00", ProtocolViolation),
    "subscribe no options": (b"\x82\x06\x00\x01\x00\x00\x01a", MalformedPacket),
    "unsubscribe empty filter": (b"\xa2\x05\x00\x01\x00\x00\x00", MalformedPacket),
    "subscribe flags 0": (b"\x80\x07\x00\x01\x00\x00\x01a\x00", MalformedPacket),
    "unsubscribe no filters": (b"\xa2\x03\x00\x01\x00", ProtocolViolation),
    "unsubscribe subscription id": (b"\xa2\x08\x00\x01\x02\x0b\x01\x00\x01a", MalformedPacket),
    "suback no codes": (b"\x90\x03\x00\x01\x00", ProtocolViolation),
    "suback bad code": (b"\x90\x04\x00\x01\x00\x03", ProtocolViolation),
    "unsuback bad code": (b"\xb0\x04\x00\x01\x00\x01", ProtocolViolation),
    "disconnect bad reason": (b"\xe0\x01\x01", ProtocolViolation),
    "disconnect property cut": (b"\xe0\x03\x00\x05\x11", MalformedPacket),
    "auth without method": (b"\xf0\x02\x18\x00", ProtocolViolation),
    "auth bad reason": (b"\xf0\x01\x01", ProtocolViolation),
    "pingreq body": (b"\xc0\x01\x00", MalformedPacket),
}


@pytest.mark.parametrize(("raw", "error"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_packets(raw: bytes, error: type[ProtocolError]) -> None:
    dec = _decoder(raw)
    with pytest.raises(error) as info:
        dec.next_packet5()
    if error is not ProtocolError:
        assert type(info.value) is error
    with pytest.raises(ProtocolError):  # stays failed
        dec.next_packet5()


# ------------------------------------------------------------------ hypothesis strategies

_u32 = st.integers(0, 0xFFFF_FFFF)
_u16 = st.integers(0, 0xFFFF)
_KIND_VALUES: dict[int, Any] = {1: st.integers(0, 255), 2: _u16, 4: _u32, 6: text,
                                7: st.binary(max_size=20)}  # fmt: skip
_SPECIAL: dict[int, Any] = {  # values the spec restricts (Protocol Errors otherwise)
    0x01: st.integers(0, 1), 0x17: st.integers(0, 1), 0x19: st.integers(0, 1),
    0x24: st.integers(0, 1),
    0x25: st.integers(0, 1), 0x28: st.integers(0, 1), 0x29: st.integers(0, 1),
    0x2A: st.integers(0, 1), 0x21: st.integers(1, 0xFFFF), 0x27: st.integers(1, 0xFFFF_FFFF),
    0x08: topic_names,
}


def _field_name(name: str) -> str:
    return name.lower().replace(" ", "_")


@st.composite
def properties(draw: st.DrawFn, context: int) -> Properties:
    if draw(st.integers(0, 3)) == 0:
        return NO_PROPERTIES
    kw: dict[str, Any] = {}
    for ident, spec in SPECS.items():
        if not spec.contexts & (1 << context) or not draw(st.booleans()):
            continue
        if ident == 0x26:
            kw["user_properties"] = tuple(draw(st.lists(st.tuples(text, text), max_size=3)))
        elif ident == 0x0B:
            most = 3 if spec.repeats & (1 << context) else 1
            kw["subscription_identifiers"] = tuple(draw(st.lists(
                st.integers(1, 268_435_455), min_size=1, max_size=most)))
        elif ident != 0x16 or "authentication_method" in kw:  # data needs a method
            kw[_field_name(spec.name)] = draw(_SPECIAL.get(ident, _KIND_VALUES[spec.kind]))
    return Properties(**kw)


def _codes(ptype: PacketType) -> Any:
    return st.sampled_from(sorted(VALID_REASONS[ptype]))


@st.composite
def connects5(draw: st.DrawFn) -> Connect5:
    will = None
    if draw(st.booleans()):
        will = Will5(draw(topic_names), draw(st.binary(max_size=50)), draw(st.integers(0, 2)),
                     draw(st.booleans()), draw(properties(WILL)))  # fmt: skip
    return Connect5(draw(text), draw(st.booleans()), draw(_u16),
                    draw(st.one_of(st.none(), text)), draw(st.one_of(st.none(), st.binary())),
                    will, draw(properties(PacketType.CONNECT)))  # fmt: skip


@st.composite
def connacks5(draw: st.DrawFn) -> Connack5:
    code = draw(_codes(PacketType.CONNACK))
    return Connack5(code, draw(st.booleans()) if not code else False,
                    draw(properties(PacketType.CONNACK)))  # fmt: skip


@st.composite
def publishes5(draw: st.DrawFn) -> Publish5:
    qos = draw(st.integers(0, 2))
    props = draw(properties(PacketType.PUBLISH))
    topic = draw(topic_names) if props.topic_alias is None else draw(st.just("") | topic_names)
    return Publish5(topic, draw(st.binary(max_size=300)), qos, draw(st.booleans()),
                    draw(st.booleans()) if qos else False, draw(pids) if qos else None, props)


def _acks(cls: Any, ptype: PacketType) -> Any:
    return st.builds(cls, pids, _codes(ptype), properties(ptype))


@st.composite
def auths(draw: st.DrawFn) -> Auth:
    code = draw(_codes(PacketType.AUTH))
    props = draw(properties(PacketType.AUTH))
    if (code or props != NO_PROPERTIES) and props.authentication_method is None:
        props = Properties(authentication_method=draw(text),
                           authentication_data=props.authentication_data,
                           reason_string=props.reason_string,
                           user_properties=props.user_properties)
    return Auth(code, props)


subscriptions = st.builds(Subscription, topic_filters, st.integers(0, 2), st.booleans(),
                          st.booleans(), st.integers(0, 2))  # fmt: skip

packets5 = st.one_of(
    connects5(),
    connacks5(),
    publishes5(),
    _acks(Puback5, PacketType.PUBACK),
    _acks(Pubrec5, PacketType.PUBREC),
    _acks(Pubrel5, PacketType.PUBREL),
    _acks(Pubcomp5, PacketType.PUBCOMP),
    st.builds(Subscribe5, pids, st.lists(subscriptions, min_size=1, max_size=4).map(tuple),
              properties(PacketType.SUBSCRIBE)),
    st.builds(Suback5, pids, st.lists(_codes(PacketType.SUBACK), min_size=1).map(tuple),
              properties(PacketType.SUBACK)),
    st.builds(Unsubscribe5, pids, st.lists(topic_filters, min_size=1, max_size=4).map(tuple),
              properties(PacketType.UNSUBSCRIBE)),
    st.builds(Unsuback5, pids, st.lists(_codes(PacketType.UNSUBACK), min_size=1).map(tuple),
              properties(PacketType.UNSUBACK)),
    st.just(Pingreq()),
    st.just(Pingresp()),
    st.builds(Disconnect5, _codes(PacketType.DISCONNECT), properties(PacketType.DISCONNECT)),
    auths(),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(packets5, min_size=1, max_size=6), st.data())
def test_round_trip_any_split(items: list[Packet5], data: st.DataObject) -> None:
    stream = b"".join(encode5(p) for p in items)
    assert decode_all5(stream) == items
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    dec = Decoder5()
    out: list[object] = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        dec.feed(stream[prev:cut])
        prev = cut
        while (p := dec.next_packet5()) is not None:
            out.append(p)
    assert out == items


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_only_raises_protocol_error(raw: bytes) -> None:
    dec = Decoder5(max_packet_size=4096)
    dec.feed(raw)
    try:
        while dec.next_item5() is not None:
            pass
    except ProtocolError:
        pass


@settings(max_examples=400, deadline=None)
@given(packets5, st.data())
def test_mutated_packets_only_raise_protocol_error(packet: Packet5, data: st.DataObject) -> None:
    raw = bytearray(encode5(packet))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    for dec in (Decoder5(max_packet_size=4096), Decoder(max_packet_size=4096)):
        dec.feed(bytes(raw))
        try:
            if isinstance(dec, Decoder5):
                while dec.next_item5() is not None:
                    pass
            else:
                while dec.next_item() is not None:
                    pass
        except ProtocolError:
            pass


@settings(max_examples=200, deadline=None)
@given(packets5, st.data())
def test_truncated_packets_wait(packet: Packet5, data: st.DataObject) -> None:
    raw = encode5(packet)
    cut = data.draw(st.integers(0, len(raw) - 1))
    dec = _decoder(raw[:cut])
    assert dec.next_item5() is None
    assert dec.buffered == cut


@pytest.mark.parametrize("packet", [
    Puback5(1, 0x92),  # PUBREL/PUBCOMP's code
    Pubrel5(1, 0x10),
    Pubcomp5(1, 0x80, P(reason_string="x")),
    Connack5(0x10),
    Connack5(0x86, session_present=True),  # MQTT-3.2.2-6
    Suback5(1, (0, 0x11)),
    Unsuback5(1, (0x01,)),
    Disconnect5(0x18),
    Auth(0x04, P(authentication_method="m")),
    Subscribe5(1, (Subscription("a", qos=3),)),
    Subscribe5(1, (Subscription("a", retain_handling=3),)),
    Publish5("t", properties=P(reason_string="not in PUBLISH")),
    Connect5("c", will=Will5("w", b"", properties=P(topic_alias=1))),
])  # fmt: skip
def test_encoder_refuses_what_the_peer_must_refuse(packet: Packet5) -> None:
    with pytest.raises(ValueError):
        encode5(packet)


def test_subscription_options_byte() -> None:
    """3.8.3.1: bits 0-1 QoS, 2 No Local, 3 Retain As Published, 4-5 Retain Handling."""
    assert Subscription("a").options == 0
    assert Subscription("a", 2, True, True, 2).options == 0b10_1_1_10
    assert Subscription("a", 1, retain_handling=1).options == 0x11

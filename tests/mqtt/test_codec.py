"""Byte vectors, round-trips and fuzzing for the sans-IO MQTT codec."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiedge.mqtt.codec import (
    MAX_REMAINING_LENGTH,
    Decoder,
    ProtocolError,
    decode_all,
    encode,
    encode_publish,
)
from oxiedge.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
    Will,
)

# (packet, exact bytes) for every packet type, hand-assembled from the spec's figures.
VECTORS: list[tuple[Packet, bytes]] = [
    (
        Connect("c1", clean_session=True, keep_alive=60),
        b"\x10\x0e\x00\x04MQTT\x04\x02\x00\x3c\x00\x02c1",
    ),
    (
        Connect(
            "c1",
            clean_session=False,
            keep_alive=10,
            username="u",
            password=b"pw",
            will=Will("w/t", b"bye", qos=1, retain=True),
        ),
        b"\x10\x1f\x00\x04MQTT\x04\xec\x00\x0a\x00\x02c1\x00\x03w/t\x00\x03bye\x00\x01u\x00\x02pw",
    ),
    (
        Connect("", clean_session=True, keep_alive=0, protocol_name="MQIsdp", protocol_level=3),
        b"\x10\x0e\x00\x06MQIsdp\x03\x02\x00\x00\x00\x00",
    ),
    (Connack(0, False), b"\x20\x02\x00\x00"),
    (Connack(0, True), b"\x20\x02\x01\x00"),
    (Connack(5, False), b"\x20\x02\x00\x05"),
    (Publish("a/b", b"hi"), b"\x30\x07\x00\x03a/bhi"),
    (Publish("a/b", b"", retain=True), b"\x31\x05\x00\x03a/b"),
    (Publish("a/b", b"x", qos=1, packet_id=10), b"\x32\x08\x00\x03a/b\x00\x0ax"),
    (
        Publish("a/b", b"x", qos=2, dup=True, retain=True, packet_id=0x1234),
        b"\x3d\x08\x00\x03a/b\x12\x34x",
    ),
    (Puback(1), b"\x40\x02\x00\x01"),
    (Pubrec(2), b"\x50\x02\x00\x02"),
    (Pubrel(3), b"\x62\x02\x00\x03"),
    (Pubcomp(0xFFFF), b"\x70\x02\xff\xff"),
    (
        Subscribe(7, (("a/+", 1), ("#", 2))),
        b"\x82\x0c\x00\x07\x00\x03a/+\x01\x00\x01#\x02",
    ),
    (Suback(7, (1, 0x80, 2, 0)), b"\x90\x06\x00\x07\x01\x80\x02\x00"),
    (Unsubscribe(8, ("a/+", "b")), b"\xa2\x0a\x00\x08\x00\x03a/+\x00\x01b"),
    (Unsuback(8), b"\xb0\x02\x00\x08"),
    (Pingreq(), b"\xc0\x00"),
    (Pingresp(), b"\xd0\x00"),
    (Disconnect(), b"\xe0\x00"),
]


@pytest.mark.parametrize(("packet", "raw"), VECTORS, ids=[type(p).__name__ for p, _ in VECTORS])
def test_byte_vectors(packet: Packet, raw: bytes) -> None:
    assert encode(packet) == raw
    assert decode_all(raw) == [packet]


def test_every_packet_type_has_a_vector() -> None:
    assert {type(p) for p, _ in VECTORS} == {
        Connect, Connack, Publish, Puback, Pubrec, Pubrel, Pubcomp,
        Subscribe, Suback, Unsubscribe, Unsuback, Pingreq, Pingresp, Disconnect,
    }  # fmt: skip


def test_remaining_length_multi_byte() -> None:
    payload = b"p" * 321
    raw = encode(Publish("t", payload))
    # 3 + 321 = 324 = 0b1_0100_0100 -> 0xC4 0x02 (2.2.3 example encoding)
    assert raw[:3] == b"\x30\xc4\x02"
    assert decode_all(raw) == [Publish("t", payload)]


def test_remaining_length_max_is_four_bytes() -> None:
    dec = Decoder(max_packet_size=1 << 30)
    dec.feed(b"\x30\xff\xff\xff\x7f")  # 268,435,455: legal header, body not yet here
    assert dec.next_packet() is None
    bad = Decoder(max_packet_size=1 << 30)
    bad.feed(b"\x30\xff\xff\xff\xff\x01")
    with pytest.raises(ProtocolError):
        bad.next_packet()


def test_encode_refuses_oversized_remaining_length() -> None:
    too_big = b"x" * (MAX_REMAINING_LENGTH - 4)  # + 2-byte length + 3-byte topic > max
    with pytest.raises(ValueError):
        encode_publish(b"t/x", too_big, 0)
    with pytest.raises(ValueError):
        encode_publish(b"t", b"", 1, packet_id=None)


def test_max_packet_size_enforced_from_header_before_body() -> None:
    dec = Decoder(max_packet_size=1024)
    # Header announces 1 MB; only 5 bytes arrived: refused at once, nothing buffered waits.
    dec.feed(b"\x30\x80\x80\x40")
    with pytest.raises(ProtocolError, match="max_packet_size"):
        dec.next_packet()
    with pytest.raises(ProtocolError):  # stays failed
        dec.next_packet()
    ok = Decoder(max_packet_size=1024)
    raw = encode(Publish("t", b"x" * 1000))
    assert len(raw) <= 1024
    ok.feed(raw)
    assert list(ok) == [Publish("t", b"x" * 1000)]


def test_incremental_feed_byte_by_byte() -> None:
    stream = b"".join(raw for _, raw in VECTORS)
    dec = Decoder()
    out: list[Packet] = []
    for i in range(len(stream)):
        dec.feed(stream[i : i + 1])
        out.extend(dec)
    assert out == [p for p, _ in VECTORS]
    assert dec.buffered == 0


def test_many_packets_in_one_feed() -> None:
    packets = [Publish(f"t/{i}", bytes([i % 256]) * i, qos=1, packet_id=i + 1) for i in range(300)]
    dec = Decoder()
    dec.feed(b"".join(encode(p) for p in packets))
    assert list(dec) == packets


MALFORMED = {
    "reserved type 0": b"\x00\x00",
    "reserved type 15": b"\xf0\x00",
    "publish qos 3": b"\x36\x05\x00\x01t\x00\x01",
    "qos0 with dup": b"\x38\x03\x00\x01t",
    "publish wildcard +": b"\x30\x05\x00\x03a/+",
    "publish wildcard #": b"\x30\x03\x00\x01#",
    "publish empty topic": b"\x30\x02\x00\x00",
    "publish topic too long": b"\x30\x03\x00\x05a",
    "publish missing packet id": b"\x32\x03\x00\x01t",
    "publish packet id 0": b"\x32\x05\x00\x01t\x00\x00",
    "publish bad utf8": b"\x30\x04\x00\x02\xc3\x28",
    "publish surrogate utf8": b"\x30\x05\x00\x03\xed\xa0\x80",
    "publish nul char": b"\x30\x05\x00\x03a\x00b",
    "puback flags": b"\x41\x02\x00\x01",
    "puback length 3": b"\x40\x03\x00\x01\x00",
    "puback id 0": b"\x40\x02\x00\x00",
    "pubrel flags 0": b"\x60\x02\x00\x01",
    "subscribe flags 0": b"\x80\x06\x00\x01\x00\x01a\x00",
    "subscribe no filters": b"\x82\x02\x00\x01",
    "subscribe no qos": b"\x82\x05\x00\x01\x00\x01a",
    "subscribe qos 3": b"\x82\x06\x00\x01\x00\x01a\x03",
    "subscribe reserved qos bits": b"\x82\x06\x00\x01\x00\x01a\x41",
    "unsubscribe no filters": b"\xa2\x02\x00\x01",
    "unsubscribe flags": b"\xa0\x05\x00\x01\x00\x01a",
    "pingreq body": b"\xc0\x01\x00",
    "disconnect flags": b"\xe1\x00",
    "connect bad name": b"\x10\x0c\x00\x04MQTX\x04\x02\x00\x3c\x00\x00",
    "connect reserved flag": b"\x10\x0c\x00\x04MQTT\x04\x03\x00\x3c\x00\x00",
    "connect will qos no will": b"\x10\x0c\x00\x04MQTT\x04\x0a\x00\x3c\x00\x00",
    "connect will retain no will": b"\x10\x0c\x00\x04MQTT\x04\x22\x00\x3c\x00\x00",
    "connect will qos 3": b"\x10\x12\x00\x04MQTT\x04\x1e\x00\x3c\x00\x00\x00\x01t\x00\x00",
    "connect password no user": b"\x10\x0e\x00\x04MQTT\x04\x42\x00\x3c\x00\x00\x00\x00",
    "connect trailing bytes": b"\x10\x0d\x00\x04MQTT\x04\x02\x00\x3c\x00\x00\x00",
    "connect truncated": b"\x10\x08\x00\x04MQTT\x04\x02",
    "connect will wildcard": b"\x10\x12\x00\x04MQTT\x04\x06\x00\x3c\x00\x00\x00\x01#\x00\x00",
    "connack length": b"\x20\x03\x00\x00\x00",
    "connack reserved": b"\x20\x02\x02\x00",
    "suback bad code": b"\x90\x03\x00\x01\x03",
    "suback no codes": b"\x90\x02\x00\x01",
}


@pytest.mark.parametrize("raw", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_packets_raise_protocol_error(raw: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_all(raw)


def test_unsupported_protocol_level_is_decoded_for_connack_1() -> None:
    # MQTT 5 CONNECT: level 5 then properties; we must still see the level (MQTT-3.1.2-2).
    raw = b"\x10\x0e\x00\x04MQTT\x05\x02\x00\x3c\x00\x00\x00\x00"
    [pkt] = decode_all(raw)
    assert isinstance(pkt, Connect) and pkt.protocol_level == 5


def test_no_trio_import() -> None:
    code = (
        "import sys, oxiedge.mqtt.codec, oxiedge.mqtt.bodies, oxiedge.mqtt.packets,"
        " oxiedge.mqtt.topics;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('trio', 'socket', 'asyncio')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    root = Path(__file__).resolve().parents[2]
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=root
    )
    assert res.returncode == 0, res.stdout + res.stderr


# ----------------------------------------------------------------- hypothesis strategies

_level = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00/+#"),
    max_size=6,
)
topic_names = st.lists(_level, min_size=1, max_size=5).map("/".join).filter(bool)
_filter_level = st.one_of(_level, st.just("+"))
topic_filters = st.builds(
    lambda levels, hash_: "/".join(levels + (["#"] if hash_ else [])),
    st.lists(_filter_level, min_size=0, max_size=4),
    st.booleans(),
).filter(bool)
text = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
    max_size=20,
)
pids = st.integers(1, 0xFFFF)


@st.composite
def publishes(draw: st.DrawFn) -> Publish:
    qos = draw(st.integers(0, 2))
    return Publish(
        draw(topic_names),
        draw(st.binary(max_size=300)),
        qos,
        draw(st.booleans()),
        draw(st.booleans()) if qos else False,
        draw(pids) if qos else None,
    )


@st.composite
def connects(draw: st.DrawFn) -> Connect:
    will = None
    if draw(st.booleans()):
        will = Will(draw(topic_names), draw(st.binary(max_size=50)), draw(st.integers(0, 2)),
                    draw(st.booleans()))  # fmt: skip
    username = draw(st.one_of(st.none(), text))
    password = draw(st.one_of(st.none(), st.binary(max_size=20))) if username is not None else None
    return Connect(
        draw(text), draw(st.booleans()), draw(st.integers(0, 0xFFFF)), username, password, will
    )


packets = st.one_of(
    connects(),
    st.builds(Connack, st.integers(0, 5), st.booleans()),
    publishes(),
    st.builds(Puback, pids),
    st.builds(Pubrec, pids),
    st.builds(Pubrel, pids),
    st.builds(Pubcomp, pids),
    st.builds(
        Subscribe,
        pids,
        st.lists(st.tuples(topic_filters, st.integers(0, 2)), min_size=1, max_size=4).map(tuple),
    ),
    st.builds(Suback, pids, st.lists(st.sampled_from([0, 1, 2, 0x80]), min_size=1).map(tuple)),
    st.builds(Unsubscribe, pids, st.lists(topic_filters, min_size=1, max_size=4).map(tuple)),
    st.builds(Unsuback, pids),
    st.just(Pingreq()),
    st.just(Pingresp()),
    st.just(Disconnect()),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(packets, min_size=1, max_size=8), st.data())
def test_round_trip_any_split(items: list[Packet], data: st.DataObject) -> None:
    stream = b"".join(encode(p) for p in items)
    assert decode_all(stream) == items
    # The same stream cut at arbitrary points decodes to the same packets.
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    dec = Decoder()
    out: list[Packet] = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        dec.feed(stream[prev:cut])
        prev = cut
        out.extend(dec)
    assert out == items


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_only_raises_protocol_error(raw: bytes) -> None:
    dec = Decoder(max_packet_size=4096)
    dec.feed(raw)
    try:
        for _ in dec:
            pass
    except ProtocolError:
        pass


@settings(max_examples=300, deadline=None)
@given(packets, st.data())
def test_mutated_packets_only_raise_protocol_error(packet: Packet, data: st.DataObject) -> None:
    raw = bytearray(encode(packet))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    dec = Decoder(max_packet_size=4096)
    dec.feed(bytes(raw))
    try:
        for _ in dec:
            pass
    except ProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(packets, st.data())
def test_truncated_packets_wait_or_fail(packet: Packet, data: st.DataObject) -> None:
    raw = encode(packet)
    cut = data.draw(st.integers(0, len(raw) - 1))
    dec = Decoder()
    dec.feed(raw[:cut])
    assert dec.next_packet() is None  # never a partial packet, never an exception
    assert dec.buffered == cut
    if cut:
        with pytest.raises(ProtocolError, match="incomplete"):
            decode_all(raw[:cut])


# ----------------------------------------------------------------- next_item (hot path)


def _item(raw: bytes) -> object:
    dec = Decoder()
    dec.feed(raw)
    return dec.next_item()


def test_next_item_qos0_publish_forwards_its_own_bytes() -> None:
    raw = encode_publish(b"a/b", b"hello")
    assert _item(raw) == ("a/b", b"a/b", 0, False, False, None, b"hello", raw)
    # What a QoS 0 subscriber must receive is exactly what arrived.
    assert encode(Publish("a/b", b"hello")) == raw


@pytest.mark.parametrize(
    "raw",
    [
        encode_publish(b"a/b", b"x", 0, True),  # RETAIN: live deliveries carry RETAIN 0
        encode_publish(b"a/b", b"x", 1, False, False, 7),  # QoS 1: packet id, QoS differ
        b"\x30\x86\x00\x00\x03a/bx",  # remaining length 6 padded to 2 bytes (not minimal)
    ],
)
def test_next_item_does_not_forward_what_would_differ(raw: bytes) -> None:
    item = _item(raw)
    assert isinstance(item, tuple)
    assert item[0] == "a/b" and item[6] == b"x" and item[7] is None


def test_next_item_other_packets_and_partial_input() -> None:
    assert _item(encode(Puback(5))) == 5  # a PUBACK: its packet id, no object
    assert _item(encode(Pubrec(5))) == Pubrec(5)
    assert _item(encode_publish(b"t", b"payload")[:-1]) is None


@pytest.mark.parametrize(
    "raw",
    [
        b"\x36\x05\x00\x01ax\x01",  # QoS 3
        b"\x38\x04\x00\x01ax",  # DUP on QoS 0
        b"\x30\x03\x00\x01+",  # wildcard topic name
        b"\x32\x05\x00\x01a\x00\x00",  # packet id 0
        b"\x30\x03\x00\x05a",  # truncated topic
        b"\x40\x02\x00\x00",  # PUBACK of packet id 0 (MQTT-2.3.1-1)
        b"\x40\x03\x00\x01\x00",  # PUBACK of remaining length 3
        b"\x41\x02\x00\x01",  # PUBACK with flags (MQTT-2.2.2-2)
    ],
)
def test_next_item_rejects_what_next_packet_rejects(raw: bytes) -> None:
    dec = Decoder()
    dec.feed(raw)
    with pytest.raises(ProtocolError):
        dec.next_item()
    with pytest.raises(ProtocolError):
        decode_all(raw)
    with pytest.raises(ProtocolError, match="already failed"):
        dec.next_item()


def test_a_read_of_one_whole_packet_is_not_copied() -> None:
    # The hot path: a read that starts on a packet boundary becomes the buffer as is, so
    # a QoS 0 PUBLISH read whole is forwarded as the very bytes read.
    raw = encode_publish(b"a/b", b"payload")
    dec = Decoder()
    dec.feed(raw)
    item = dec.next_item()
    assert isinstance(item, tuple) and item[7] is raw
    assert dec.next_item() is None and dec.buffered == 0


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_feeds_of_any_buffer_type_across_packet_boundaries(kind: type) -> None:
    # bytes buffer (boundary), then a partial packet (bytearray accumulates), then the
    # rest with two more packets: every switch between the two buffer kinds.
    a, b, c = (encode_publish(b"t/%d" % i, b"p" * i, 1, False, False, i + 1) for i in (1, 2, 3))
    stream = a + b + c
    dec = Decoder()
    got: list[object] = []
    for start, end in [(0, len(a)), (len(a), len(a) + 3), (len(a) + 3, len(stream))]:
        source = stream[start:end]
        dec.feed(kind(source) if kind is not memoryview else memoryview(bytearray(source)))
        while (item := dec.next_item()) is not None:
            got.append(item)
    assert [(i[0], i[5], i[6]) for i in got] == [  # type: ignore[index]
        ("t/1", 2, b"p"), ("t/2", 3, b"pp"), ("t/3", 4, b"ppp")]
    assert dec.buffered == 0

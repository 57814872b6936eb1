"""Byte vectors, round-trips and garbage for the sans-IO frame codec."""

from __future__ import annotations

import struct
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiedge.amqp import codec, spec
from oxiedge.amqp.codec import PROTOCOL_HEADER, Command, FrameParser, Heartbeat
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.fields import MAX_DEPTH, check_table, decode_table, encode_table, split_table


def parse_all(data: bytes, frame_max: int = 131072, header: bool = False) -> list[object]:
    parser = FrameParser(frame_max, expect_header=header)
    parser.feed(data)
    out: list[object] = []
    while (ev := parser.next_event()) is not None:
        out.append(ev)
    return out


def test_codec_does_not_import_trio() -> None:
    code = (
        "import sys; import oxiedge.amqp.codec, oxiedge.amqp.fields, oxiedge.amqp.spec;"
        "sys.exit(1 if 'trio' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# -- byte vectors ----------------------------------------------------------------------


def test_method_frame_vector() -> None:
    raw = codec.encode_method(1, spec.BasicAck(delivery_tag=5, multiple=True))
    assert raw == (
        b"\x01\x00\x01\x00\x00\x00\x0d"
        + b"\x00\x3c\x00\x50"
        + b"\x00\x00\x00\x00\x00\x00\x00\x05\x01"
        + b"\xce"
    )
    [cmd] = parse_all(raw)
    assert isinstance(cmd, Command) and cmd.channel == 1
    assert cmd.method == spec.BasicAck(delivery_tag=5, multiple=True) and cmd.body is None


def test_heartbeat_vector() -> None:
    assert codec.HEARTBEAT_FRAME == b"\x08\x00\x00\x00\x00\x00\x00\xce"
    assert parse_all(codec.HEARTBEAT_FRAME) == [codec.HEARTBEAT]
    assert isinstance(codec.HEARTBEAT, Heartbeat)


def test_content_header_and_body_vector() -> None:
    props = spec.BasicProperties(delivery_mode=2).encode()
    raw = codec.encode_content(
        3, spec.BasicPublish(exchange="", routing_key="q"), props, b"hello", 4096
    )
    method = b"\x00\x3c\x00\x28\x00\x00\x00\x01q\x00"
    header = b"\x00\x3c\x00\x00" + struct.pack(">Q", 5) + b"\x10\x00\x02"
    assert raw == (
        b"\x01\x00\x03"
        + struct.pack(">I", len(method))
        + method
        + b"\xce"
        + b"\x02\x00\x03"
        + struct.pack(">I", len(header))
        + header
        + b"\xce"
        + b"\x03\x00\x03\x00\x00\x00\x05hello\xce"
    )
    [cmd] = parse_all(raw)
    assert isinstance(cmd, Command)
    assert cmd.properties == props and cmd.body == b"hello" and cmd.delivery_mode == 2


def test_multi_frame_body_and_empty_body() -> None:
    body = bytes(range(256)) * 40  # 10240 bytes, frame_max 4096 -> 3 body frames
    raw = codec.encode_content(1, spec.BasicPublish(routing_key="k"), b"\x00\x00", body, 4096)
    assert raw.count(b"\x03\x00\x01") >= 3
    [cmd] = parse_all(raw, frame_max=4096)
    assert isinstance(cmd, Command) and cmd.body == body and cmd.delivery_mode is None
    empty = codec.encode_content(1, spec.BasicPublish(), b"\x00\x00", b"", 4096)
    [cmd] = parse_all(empty)
    assert isinstance(cmd, Command) and cmd.body == b""


def test_interleaved_channels_assemble_separately() -> None:
    a = codec.encode_content(1, spec.BasicPublish(routing_key="a"), b"\x00\x00", b"A" * 10, 0)
    b = codec.encode_content(2, spec.BasicPublish(routing_key="b"), b"\x00\x00", b"B" * 10, 0)
    frames_a = split_frames(a)
    frames_b = split_frames(b)
    mixed = b"".join(x for pair in zip(frames_a, frames_b, strict=True) for x in pair)
    cmds = parse_all(mixed)
    assert [(c.channel, c.body) for c in cmds] == [(1, b"A" * 10), (2, b"B" * 10)]  # type: ignore[attr-defined]


def split_frames(raw: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(raw):
        size = struct.unpack_from(">I", raw, pos + 3)[0]
        out.append(raw[pos : pos + 8 + size])
        pos += 8 + size
    return out


def test_byte_at_a_time_feeding() -> None:
    raw = (
        PROTOCOL_HEADER
        + codec.encode_content(
            1, spec.BasicPublish(routing_key="k"), b"\x00\x00", b"xyz" * 100, 4096
        )
        + codec.HEARTBEAT_FRAME
    )
    parser = FrameParser(4096)
    events = []
    for i in range(len(raw)):
        parser.feed(raw[i : i + 1])
        while (ev := parser.next_event()) is not None:
            events.append(ev)
    assert len(events) == 2 and events[0].body == b"xyz" * 100  # type: ignore[union-attr]


# -- errors: right reply code, typed exception ---------------------------------------------


def code_of(data: bytes, frame_max: int = 4096, header: bool = False) -> int:
    with pytest.raises(AmqpError) as info:
        parse_all(data, frame_max, header)
    return info.value.code


def test_protocol_header_mismatch() -> None:
    with pytest.raises(codec.ProtocolHeaderMismatch):
        parse_all(b"AMQP\x00\x00\x08\x00", header=True)
    with pytest.raises(codec.ProtocolHeaderMismatch):
        parse_all(b"GET / HTTP/1.1\r\n", header=True)
    assert parse_all(PROTOCOL_HEADER, header=True) == []


def test_frame_errors_501() -> None:
    good = codec.encode_method(1, spec.ChannelOpen())
    assert code_of(good[:-1] + b"\x00") == 501  # frame-end
    assert code_of(b"\x07" + good[1:]) == 501  # unknown frame type
    assert code_of(b"\x08\x00\x01\x00\x00\x00\x00\xce") == 501  # heartbeat on channel 1
    assert code_of(b"\x01\x00\x01\x00\x01\x00\x00") == 501  # 64 KiB frame > frame_max
    body = codec.encode_content(1, spec.BasicPublish(), b"\x00\x00", b"abc", 0)
    frames = split_frames(body)
    long_body = codec.encode_frame(3, 1, b"abcd")
    assert code_of(frames[0] + frames[1] + long_body) == 501


def test_syntax_errors_502() -> None:
    # basic.publish cut after the ids
    assert code_of(codec.encode_frame(1, 1, b"\x00\x3c\x00\x28\x00")) == 502
    # queue.declare whose arguments table claims more bytes than present
    payload = b"\x00\x32\x00\x0a\x00\x00\x01q\x00\x00\x00\x00\x09"
    assert code_of(codec.encode_frame(1, 1, payload)) == 502
    # content header with truncated properties
    method = codec.encode_method(1, spec.BasicPublish())
    header = codec.encode_frame(2, 1, b"\x00\x3c\x00\x00" + bytes(8) + b"\x80\x00\x05ab")
    assert code_of(method + header) == 502


def _nested_table(levels: int) -> bytes:
    """A field table ``{"n": {"n": ... {}}}`` nesting ``levels`` tables inside the outer one."""
    table = b"\x00\x00\x00\x00"
    for _ in range(levels):
        entry = b"\x01nF" + table
        table = len(entry).to_bytes(4, "big") + entry
    return table


def test_malformed_headers_table_is_502_at_the_content_header() -> None:
    """The headers are the one property the broker decodes later (dead-lettering,
    x-delivery-count, headers exchanges): a table it cannot read is refused when it arrives,
    not silently dropped later (a poison message would escape its delivery limit)."""
    method = codec.encode_method(1, spec.BasicPublish())

    def with_headers(table: bytes) -> bytes:
        props = b"\x20\x00" + table  # headers only
        return method + codec.encode_frame(2, 1, b"\x00\x3c\x00\x00" + bytes(8) + props)

    unknown_type = b"\x00\x00\x00\x05\x01kZ\x00\x00"  # 'Z' is no field type
    not_utf8_key = b"\x00\x00\x00\x03\x01\xffV"
    truncated_value = b"\x00\x00\x00\x04\x01kI\x00"  # an int32 of one byte
    for table in (unknown_type, not_utf8_key, truncated_value, _nested_table(MAX_DEPTH + 1)):
        assert code_of(with_headers(table)) == 502, table[:16]
    for table in (_nested_table(MAX_DEPTH), b"\x00\x00\x00\x00"):  # the bound; empty
        raw = b"\x20\x00" + table
        assert codec.scan_properties(raw) is None
        assert spec.BasicProperties.decode(raw)[1] == len(raw)


def test_unknown_method_503() -> None:
    assert code_of(codec.encode_frame(1, 1, b"\x00\x3c\x03\xe7")) == 503


def test_unexpected_frames_505() -> None:
    assert code_of(codec.encode_frame(3, 1, b"abc")) == 505  # body without header
    header = codec.encode_frame(2, 1, b"\x00\x3c\x00\x00" + bytes(8) + b"\x00\x00")
    assert code_of(header) == 505  # header without method
    method = codec.encode_method(1, spec.BasicPublish())
    assert code_of(method + codec.encode_method(1, spec.BasicQos())) == 505


# -- field tables -----------------------------------------------------------------------


def test_field_table_vectors() -> None:
    from decimal import Decimal

    from oxiedge.amqp.fields import Timestamp, decode_table, encode_table

    table = {
        "b": True,
        "i": 7,
        "s": "x",
        "by": b"\x00",
        "n": None,
        "f": 1.5,
        "d": Decimal("1.25"),
        "t": Timestamp(10),
        "a": [1, "y"],
        "F": {"k": -1},
    }
    raw = encode_table(table)
    assert raw[:4] == struct.pack(">I", len(raw) - 4)
    assert b"\x01bt\x01" in raw and b"\x01iI\x00\x00\x00\x07" in raw
    assert b"\x01dD\x02\x00\x00\x00\x7d" in raw and b"\x01tT" + struct.pack(">Q", 10) in raw
    assert decode_table(raw)[0] == table
    # RabbitMQ-only letters decode too: b B s u i l L f x
    extra = (
        b"\x01b"
        b"b\xff"
        b"\x01c"
        b"B\xff"
        b"\x01s"
        b"s\xff\xfe"
        b"\x01u"
        b"u\xff\xfe"
        b"\x01i"
        b"i\xff\xff\xff\xff"
        b"\x01l"
        b"l" + struct.pack(">q", -5) + b"\x01L"
        b"L" + struct.pack(">Q", 2**64 - 1) + b"\x01f"
        b"f" + struct.pack(">f", 0.5) + b"\x01x"
        b"x\x00\x00\x00\x02hi" + b"\x01v"
        b"V"
    )
    decoded, _ = decode_table(struct.pack(">I", len(extra)) + extra)
    assert decoded == {
        "b": -1,
        "c": 255,
        "s": -2,
        "u": 65534,
        "i": 2**32 - 1,
        "l": -5,
        "L": 2**64 - 1,
        "f": 0.5,
        "x": b"hi",
        "v": None,
    }


def test_field_table_errors() -> None:
    from oxiedge.amqp.fields import decode_table

    for bad in (
        b"\x00\x00\x00\x05\x01aZ\x00\x00",
        b"\x00\x00\x00\x03\x05ab",
        b"\x00\x00\x00\x03\x01aI",
        b"\x00\x00",
    ):
        with pytest.raises(AmqpError) as info:
            decode_table(bad)
        assert info.value.code == 502
    deep = b"V"
    for _ in range(200):
        deep = b"A" + struct.pack(">I", len(deep)) + deep
    with pytest.raises(AmqpError):
        decode_table(struct.pack(">I", len(deep) + 2) + b"\x01a" + deep)


# -- hypothesis ----------------------------------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20)
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)
_tables = st.dictionaries(st.text(max_size=10), _values, max_size=6)


@given(_tables)
def test_table_round_trip(table: dict[str, Any]) -> None:
    from oxiedge.amqp.fields import decode_table, encode_table

    assert decode_table(encode_table(table))[0] == table


def _outcome(f: Any, buf: bytes) -> int | None:
    try:
        return int(f(buf)[1] if f is decode_table else f(buf))
    except AmqpError as exc:
        assert exc.code == 502
        return None


#: Typed values the Python encoder never writes (b, s, u, i, f, D, T, non-UTF-8 S).
_TYPED = (b"\x01bb\xfe\x01ss\xff\xfe\x01uu\x00\x01\x01ii\x00\x00\x00\x07\x01ff\x3f\xc0\x00\x00"
          b"\x01DD\x02\x00\x00\x01\x00\x01TT\x00\x00\x00\x00\x00\x00\x00\x09\x01SS\x00\x00\x00\x01\xff")


@settings(max_examples=300, derandomize=True, deadline=None)  # (no timing: a loaded CI box)
@given(_tables, st.randoms(use_true_random=False))
def test_check_table_accepts_exactly_what_decode_table_reads(
        table: dict[str, Any], rnd: Any) -> None:
    """The arrival check (no objects built) and the decoder agree on every input: valid,
    typed, and mutated tables; split_table re-encodes byte-exact."""
    from tests.fuzz.mutate import mutate

    plain = encode_table({k: v for k, v in table.items() if k not in "bsuifDTS"})
    typed = struct.pack(">I", len(plain) - 4 + len(_TYPED)) + plain[4:] + _TYPED
    for raw in (plain, typed):
        assert check_table(raw) == len(raw) == decode_table(raw)[1]
        parts, end = split_table(raw)
        assert end == len(raw) and encode_table(parts) == raw
        for _ in range(20):
            bad = mutate(raw, rnd)
            assert _outcome(check_table, bad) == _outcome(decode_table, bad), bad


_short = st.text(max_size=30).filter(lambda s: len(s.encode()) <= 255)


@given(
    st.builds(
        spec.BasicProperties,
        content_type=st.none() | _short,
        headers=st.none() | _tables,
        delivery_mode=st.none() | st.integers(0, 255),
        priority=st.none() | st.integers(0, 9),
        correlation_id=st.none() | _short,
        timestamp=st.none() | st.integers(0, 2**64 - 1),
        cluster_id=st.none() | _short,
        reply_to=st.none() | _short,
        expiration=st.none() | st.integers(0, 10**9).map(str),
    )
)
def test_properties_round_trip(props: spec.BasicProperties) -> None:
    raw = props.encode()
    assert spec.BasicProperties.decode(raw) == (props, len(raw))
    assert codec.scan_properties(raw) == props.delivery_mode
    assert codec.expiration_of(raw) == props.expiration


@given(st.sampled_from(sorted(spec.METHODS.values(), key=lambda c: c.NAME)), st.data())
def test_method_round_trip(cls: type[spec.Method], data: st.DataObject) -> None:
    import dataclasses

    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        default: Any = (f.default if f.default is not dataclasses.MISSING
                        else f.default_factory())  # type: ignore[misc,operator,unused-ignore]
        if isinstance(default, bool):
            kwargs[f.name] = data.draw(st.booleans())
        elif isinstance(default, int):
            kwargs[f.name] = data.draw(st.integers(0, 255))
        elif isinstance(default, str):
            kwargs[f.name] = data.draw(_short)
        elif isinstance(default, bytes):
            kwargs[f.name] = data.draw(st.binary(max_size=40))
        else:
            kwargs[f.name] = data.draw(_tables)
    method = cls(**kwargs)
    [cmd] = (
        parse_all(codec.encode_method(7, method))
        if not cls.HAS_CONTENT
        else parse_all(codec.encode_content(7, method, b"\x00\x00", b"body", 4096))
    )
    assert cmd.method == method  # type: ignore[attr-defined]


@settings(max_examples=400)
@given(st.binary(max_size=300), st.booleans())
def test_garbage_raises_only_amqp_error(data: bytes, header: bool) -> None:
    parser = FrameParser(4096, expect_header=header)
    parser.feed(data)
    try:
        while parser.next_event() is not None:
            pass
    except AmqpError as exc:
        assert exc.code in (501, 502, 503, 505)


@settings(max_examples=300)
@given(
    st.sampled_from(
        [
            codec.encode_method(
                1, spec.QueueDeclare(queue="q", arguments={"x-a": [1, {"b": "c"}]})
            ),
            codec.encode_content(
                1,
                spec.BasicPublish(routing_key="r"),
                spec.BasicProperties(headers={"h": 1}, delivery_mode=2).encode(),
                b"body",
                4096,
            ),
            codec.encode_method(
                0, spec.ConnectionStartOk(client_properties={"p": "x"}, response=b"\x00u\x00p")
            ),
        ]
    ),
    st.integers(0, 400),
    st.integers(0, 255),
)
def test_mutated_frames_raise_only_amqp_error(frame: bytes, index: int, byte: int) -> None:
    mutated = bytearray(frame)
    mutated[index % len(mutated)] = byte
    parser = FrameParser(4096, expect_header=False)
    parser.feed(bytes(mutated))
    try:
        while parser.next_event() is not None:
            pass
    except AmqpError as exc:
        assert exc.code in (501, 502, 503, 505)


def test_reply_text_fits_a_shortstr() -> None:
    from oxiedge.amqp.fields import encode_shortstr

    err = AmqpError(404, "no queue '" + "é" * 200 + "' in vhost '/'")
    assert len(err.reply_text.encode()) <= 255
    encode_shortstr(err.reply_text)  # does not raise


def test_expiration_reaches_the_command() -> None:
    props = spec.BasicProperties(content_type="t", headers={"a": 1}, delivery_mode=2,
                                 priority=1, correlation_id="c", reply_to="r",
                                 expiration="1500").encode()
    [cmd] = parse_all(codec.encode_content(1, spec.BasicPublish(), props, b"x", 0))
    assert isinstance(cmd, Command) and cmd.expiration == "1500" and cmd.delivery_mode == 2
    [cmd] = parse_all(codec.encode_content(1, spec.BasicPublish(), b"\x00\x00", b"x", 0))
    assert isinstance(cmd, Command) and cmd.expiration is None


def test_message_record_versions() -> None:
    from oxiedge.amqp import persist

    plain = persist.encode_record("ex", "rk", b"\x00\x00", b"body")
    assert plain[0] == 1
    assert persist.decode_record(plain) == ("ex", "rk", b"\x00\x00", b"body", 0.0)
    ttl = persist.encode_record("ex", "rk", b"\x01\x00", b"body", 1_700_000_000.5)
    assert ttl[0] == 2
    assert persist.decode_record(ttl) == ("ex", "rk", b"\x01\x00", b"body", 1_700_000_000.5)


def test_frame_max_fudge_like_rabbitmq() -> None:
    # payload == frame_max (frame = frame_max + 8) is tolerated; one byte more is not
    ok = codec.encode_frame(3, 1, b"x" * 4096)
    header = codec.encode_content(1, spec.BasicPublish(), b"\x00\x00", b"x" * 4096, 0)
    frames = split_frames(header)
    [cmd] = parse_all(frames[0] + frames[1] + ok, frame_max=4096)
    assert isinstance(cmd, Command) and len(cmd.body or b"") == 4096
    assert code_of(codec.encode_frame(3, 1, b"x" * 4097), frame_max=4096) == 501


# -- the per-message encoders are the generic encoder's bytes --------------------------------

_shortstr = st.text(max_size=40)


@settings(max_examples=200, deadline=None)
@given(channel=st.integers(0, 65535), tag=st.integers(0, 2**64 - 1), multiple=st.booleans())
def test_encode_basic_ack_is_encode_method(channel: int, tag: int, multiple: bool) -> None:
    assert codec.encode_basic_ack(channel, tag, multiple) == codec.encode_method(
        channel, spec.BasicAck(tag, multiple))


@settings(max_examples=300, deadline=None)
@given(channel=st.integers(0, 65535), ctag=_shortstr, tag=st.integers(0, 2**64 - 1),
       redelivered=st.booleans(), exchange=_shortstr, key=_shortstr,
       props=st.sampled_from([b"\x00\x00", spec.BasicProperties(delivery_mode=2).encode()]),
       body=st.binary(max_size=300), frame_max=st.sampled_from([0, 9, 10, 50, 131072]))
def test_encode_deliver_is_encode_content(channel: int, ctag: str, tag: int,
                                          redelivered: bool, exchange: str, key: str,
                                          props: bytes, body: bytes, frame_max: int) -> None:
    from oxiedge.amqp.fields import encode_shortstr

    assert codec.encode_deliver(
        channel, encode_shortstr(ctag), tag, redelivered, codec.encode_names(exchange, key),
        props, body, frame_max) == codec.encode_content(
            channel, spec.BasicDeliver(ctag, tag, redelivered, exchange, key), props, body,
            frame_max)


def test_repeated_publish_methods_are_decoded_once_and_the_cache_is_bounded() -> None:
    p = FrameParser(0, expect_header=False)
    frames = [codec.encode_content(1, spec.BasicPublish(routing_key=f"k{i % 3}"), b"\x00\x00",
                                   b"x", 0) for i in range(6)]
    p.feed(b"".join(frames))
    got = [p.next_event() for _ in frames]
    assert [c.method.routing_key for c in got] == [f"k{i % 3}" for i in range(6)]  # type: ignore[union-attr]
    assert got[0].method is got[3].method  # type: ignore[union-attr]
    for i in range(codec.PUBLISH_CACHE + 5):  # distinct keys: the cache starts over
        p.feed(codec.encode_content(1, spec.BasicPublish(routing_key=f"d{i}"), b"\x00\x00",
                                    b"", 0))
        assert p.next_event().method.routing_key == f"d{i}"  # type: ignore[union-attr]
    assert len(p._publishes) <= codec.PUBLISH_CACHE

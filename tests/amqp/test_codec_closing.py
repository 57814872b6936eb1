"""Sans-IO: a channel being closed drops its frames until close-ok; a content header
announcing more than ``max_body`` is refused at once (no body is buffered)."""

from __future__ import annotations

import pytest

from oxiedge.amqp import codec, spec
from oxiedge.amqp.codec import Command, ContentTooLarge, FrameParser

PROPS = spec.BasicProperties().encode()


def publish(channel: int, body: bytes) -> bytes:
    return codec.encode_content(channel, spec.BasicPublish(0, "", "q"), PROPS, body, 4096)


def events(parser: FrameParser) -> list[object]:
    out: list[object] = []
    while (ev := parser.next_event()) is not None:
        out.append(ev)
    return out


def test_dropped_channel_passes_only_close_and_close_ok() -> None:
    p = FrameParser(0, expect_header=False)
    p.drop_channel(1)
    p.feed(publish(1, b"x" * 10_000)
           + codec.encode_method(1, spec.BasicAck(3))
           + codec.encode_frame(1, 1, b"\x00\x3c\x27\x0f")  # unknown method: dropped too
           + codec.encode_frame(3, 1, b"body without header")
           + publish(2, b"other channel")
           + codec.encode_method(1, spec.ChannelClose(200, "x", 0, 0))
           + codec.encode_method(1, spec.ChannelCloseOk()))
    got = events(p)
    assert [(c.channel, type(c.method)) for c in got if isinstance(c, Command)] == [
        (2, spec.BasicPublish), (1, spec.ChannelClose), (1, spec.ChannelCloseOk)]
    assert p.discarded == 5 + 1 + 1 + 1  # publish (method, header, 3 bodies), ack, unknown, body
    p.resume_channel(1)
    p.feed(publish(1, b"again"))
    (cmd,) = events(p)
    assert isinstance(cmd, Command) and cmd.body == b"again"


def test_content_header_over_max_body_is_refused_before_any_body() -> None:
    p = FrameParser(0, expect_header=False, max_body=1000)
    frames = publish(1, b"y" * 5000)
    method_and_header = frames[: frames.index(b"\x03\x00\x01")]  # up to the first body
    p.feed(method_and_header)
    with pytest.raises(ContentTooLarge) as info:
        p.next_event()
    assert info.value.code == 406 and not info.value.hard
    assert "message size 5000 is larger than configured max size 1000" in info.value.text
    assert not p.receiving
    p.feed(frames[len(method_and_header):] + codec.encode_method(1, spec.ChannelCloseOk()))
    (ok,) = events(p)  # the body frames were skipped
    assert isinstance(ok, Command) and isinstance(ok.method, spec.ChannelCloseOk)


def test_receiving_bytes_counts_a_partial_body() -> None:
    p = FrameParser(0, expect_header=False)
    frames = publish(1, b"z" * 10_000)
    p.feed(frames[:-100])
    assert events(p) == []
    assert p.receiving and 0 < p.receiving_bytes < 10_000

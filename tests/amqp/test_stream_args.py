"""Stream arguments, sans-IO: intervals, offsets, what a stream declare or consume refuses,
and the x-stream-offset header written into a message's properties."""

from __future__ import annotations

from typing import Any

import pytest

from oxiedge.amqp import spec
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.fields import Timestamp
from oxiedge.amqp.stream import with_offset
from oxiedge.amqp.stream_args import (
    StartAt,
    check_stream_declare,
    interval_seconds,
    start_at,
    stream_consume,
)

NOW = 1_000_000_000


@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30), ("30m", 1800), ("6h", 21600), ("7D", 604800), ("1M", 2592000),
    ("1Y", 31536000), (b"2h", 7200), ("0s", None), ("10", None), ("6H", None), ("h", None),
    ("-1h", None), (5, None), ("9" * 5000 + "s", None)])
def test_interval(text: Any, seconds: int | None) -> None:
    assert interval_seconds(text) == seconds


@pytest.mark.parametrize(("value", "start"), [
    ("first", StartAt("first")), ("last", StartAt("last")), (b"next", StartAt("next")),
    (42, StartAt("offset", 42)), (-3, StartAt("offset", 0)),
    (Timestamp(1000), StartAt("time", 1_000_000)), ("30m", StartAt("time", NOW - 1_800_000))])
def test_start_at(value: Any, start: StartAt) -> None:
    assert start_at("q", value, NOW) == start


@pytest.mark.parametrize("value", ["bogus", "0s", "10", True, 1.5, None, {"a": 1},
                                   "9" * 5000 + "h"])
def test_bad_offset_is_406_naming_the_argument(value: Any) -> None:
    with pytest.raises(AmqpError) as err:
        start_at("q", value, NOW)
    assert err.value.code == 406 and "'x-stream-offset'" in err.value.text


def test_consume_needs_prefetch_and_manual_acks() -> None:
    assert stream_consume("q", {}, False, 10, NOW) == StartAt("next")
    with pytest.raises(AmqpError) as err:
        stream_consume("q", {}, False, 0, NOW)
    assert err.value.code == 406
    with pytest.raises(AmqpError) as err:
        stream_consume("q", {}, True, 10, NOW)
    assert err.value.code == 540 and err.value.hard
    with pytest.raises(AmqpError) as err:
        stream_consume("q", {"x-priority": 1}, False, 10, NOW)
    assert err.value.code == 406 and "'x-priority'" in err.value.text
    with pytest.raises(AmqpError) as err:
        stream_consume("q", {"x-credit": 1}, False, 10, NOW)
    assert err.value.code == 540


def test_declare_flags_and_arguments() -> None:
    ok = {"x-queue-type": "stream", "x-max-age": "6h", "x-stream-max-segment-size-bytes": 10}
    check_stream_declare("q", ok, durable=True, exclusive=False, auto_delete=False)
    for flags, prop in (((False, False, False), "non-durable"),
                        ((True, True, False), "exclusive-owner"),
                        ((True, False, True), "auto-delete")):
        with pytest.raises(AmqpError) as err:
            check_stream_declare("q", ok, durable=flags[0], exclusive=flags[1],
                                 auto_delete=flags[2])
        assert err.value.code == 406 and f"'{prop}'" in err.value.text
    with pytest.raises(AmqpError) as err:
        check_stream_declare("q", {"x-message-ttl": 5}, durable=True, exclusive=False,
                             auto_delete=False)
    assert err.value.code == 406 and "'x-message-ttl'" in err.value.text
    with pytest.raises(AmqpError) as err:  # (past int()'s digits: a 406, no ValueError)
        check_stream_declare("q", {"x-max-age": "9" * 5000 + "D"}, durable=True,
                             exclusive=False, auto_delete=False)
    assert err.value.code == 406 and "'x-max-age'" in err.value.text


@pytest.mark.parametrize("props", [
    spec.BasicProperties(),
    spec.BasicProperties(delivery_mode=2),
    spec.BasicProperties(content_type="text/plain", delivery_mode=2, message_id="m1"),
    spec.BasicProperties(content_type="a", content_encoding="gzip", headers={"k": "v"},
                         priority=3, timestamp=1700000000, app_id="x"),
    spec.BasicProperties(headers={}),
    spec.BasicProperties(headers={"x-stream-offset": 5, "n": 1}),  # published again
])
def test_offset_header_added_with_every_other_property_kept(props: Any) -> None:
    raw = props.encode()
    out, _ = spec.BasicProperties.decode(with_offset(raw, 1234))
    headers = dict(props.headers or {})
    headers["x-stream-offset"] = 1234
    assert out.headers == headers
    for name in spec.PROPERTY_NAMES:
        if name != "headers":
            assert getattr(out, name) == getattr(props, name), name

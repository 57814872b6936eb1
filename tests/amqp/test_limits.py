"""Per-connection and per-message bounds (issue 14, AMQP): each refuses with a clear reply
code, counts in ``oxiedge status`` and leaves other connections alone."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from oxiedge.amqp import codec, spec
from tests.amqp.conftest import params
from tests.amqp.rawclient import RawClient
from tests.conftest import ServerProcess

PROPS = spec.BasicProperties().encode()


def amqp_status(srv: ServerProcess) -> dict[str, Any]:
    return dict(json.loads(srv.cli("status", "--json").stdout)["amqp"])


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("limits") / "data", (
        "--mqtt-port", "off", "--amqp-max-message-size", "1MiB",
        "--amqp-queue-bytes", "10KiB", "--amqp-max-consumers-per-connection", "3",
        "--amqp-max-queues-per-connection", "3", "--amqp-max-queues", "6",
        "--amqp-channel-max", "4", "--amqp-preauth-max-size", "8KiB"), None).start()
    yield srv
    srv.stop()


def test_content_header_over_max_message_size_is_406_at_once(limited: ServerProcess) -> None:
    raw = RawClient(limited.amqp_port)
    raw.handshake()
    raw.open_channel(1)
    tib = 1 << 40
    raw.send(codec.encode_method(1, spec.BasicPublish(0, "", "q"))
             + codec.encode_frame(2, 1, struct.pack(">HHQ", 60, 0, tib) + PROPS))
    close = raw.expect(spec.ChannelClose, 1)
    assert isinstance(close, spec.ChannelClose)
    assert close.reply_code == 406 and (close.class_id, close.method_id) == (60, 40)
    assert f"message size {tib} is larger than configured max size {1 << 20}" \
        in close.reply_text
    # The client's body frames still in flight are dropped, then close-ok ends the close.
    raw.send(codec.encode_frame(3, 1, b"b" * 100_000) * 5
             + codec.encode_method(1, spec.ChannelCloseOk()))
    raw.open_channel(1)
    raw.call(1, spec.QueueDeclare(0, "", exclusive=True), spec.QueueDeclareOk)
    raw.call(0, spec.ConnectionClose(200, "bye", 0, 0), spec.ConnectionCloseOk)
    raw.close()
    assert amqp_status(limited)["messages_too_large"] >= 1


def test_headers_nested_3000_levels_are_refused_at_publish(limited: ServerProcess) -> None:
    """A headers table the broker could not read back (here nested 3,000 levels; the bound
    is 64) closes the connection with 502 at the content header, as it does in
    queue.declare arguments: nothing is queued, so nothing can be dead-lettered with its
    properties lost or escape x-delivery-limit (its count lives in those headers)."""
    table = b"\x00\x00\x00\x00"
    for _ in range(3000):
        entry = b"\x01nF" + table
        table = len(entry).to_bytes(4, "big") + entry
    conn = pika.BlockingConnection(params(limited.amqp_port))
    ch = conn.channel()
    ch.queue_declare("deep-headers", durable=True, arguments={"x-queue-type": "quorum",
                                                              "x-delivery-limit": 2})
    raw = RawClient(limited.amqp_port)
    raw.handshake()
    raw.open_channel(1)
    props = b"\x20\x00" + table
    raw.send(codec.encode_method(1, spec.BasicPublish(0, "", "deep-headers"))
             + codec.encode_frame(2, 1, struct.pack(">HHQ", 60, 0, 3) + props)
             + codec.encode_frame(3, 1, b"abc"))
    close = raw.expect_close(502)
    assert "nested too deeply" in close.reply_text, close
    raw.close()
    ch.basic_publish("", "deep-headers", b"fine",  # headers within the bound pass
                     pika.BasicProperties(headers={"a": {"b": [1, {"c": "d"}]}}))
    _method, props_back, body = ch.basic_get("deep-headers", auto_ack=True)
    assert body == b"fine" and props_back.headers == {"a": {"b": [1, {"c": "d"}]}}
    assert ch.basic_get("deep-headers")[0] is None  # the refused one was never queued
    ch.queue_delete("deep-headers")  # (this module's server counts queues)
    conn.close()


def test_pika_message_over_the_limit_closes_only_the_channel(limited: ServerProcess) -> None:
    conn = pika.BlockingConnection(params(limited.amqp_port))
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True,
                         arguments={"x-max-length-bytes": 4 << 20}).method.queue
    ch.basic_publish("", q, b"x" * ((1 << 20) + 1))
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_declare(q, passive=True)
    assert info.value.reply_code == 406
    ch2 = conn.channel()
    ch2.basic_publish("", q, b"x" * (1 << 20))  # exactly the limit is fine
    assert ch2.queue_declare(q, passive=True).method.message_count == 1
    conn.close()


def test_start_ok_over_the_pre_login_size_is_refused(limited: ServerProcess) -> None:
    raw = RawClient(limited.amqp_port)
    raw.send(codec.PROTOCOL_HEADER)
    raw.expect(spec.ConnectionStart)
    raw.method(0, spec.ConnectionStartOk({"junk": "j" * 20_000}, "PLAIN", b"\x00g\x00g"))
    close = raw.expect_close(501)
    assert "before login" in close.reply_text
    raw.close()
    assert amqp_status(limited)["preauth_too_large"] >= 1


def test_default_queue_byte_cap_drops_oldest(limited: ServerProcess) -> None:
    conn = pika.BlockingConnection(params(limited.amqp_port))
    ch = conn.channel()
    capped = ch.queue_declare("", exclusive=True).method.queue
    roomy = ch.queue_declare("", exclusive=True,
                             arguments={"x-max-length-bytes": 100_000}).method.queue
    for i in range(20):
        ch.basic_publish("", capped, b"%04d" % i + b"." * 1020)
        ch.basic_publish("", roomy, b"." * 1024)
    assert ch.queue_declare(capped, passive=True).method.message_count == 10
    assert ch.queue_declare(roomy, passive=True).method.message_count == 20
    first = ch.basic_get(capped, auto_ack=True)[2]
    assert first is not None and first.startswith(b"0010")  # the oldest ten were dropped
    conn.close()


def test_consumers_per_connection(limited: ServerProcess) -> None:
    conn = pika.BlockingConnection(params(limited.amqp_port))
    ch = conn.channel()
    q = ch.queue_declare("lim.consumed").method.queue
    for _ in range(3):
        ch.basic_consume(q, lambda *a: None)
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_consume(q, lambda *a: None)
    assert info.value.reply_code == 406 and "3 consumers per connection" in str(info.value)
    other = pika.BlockingConnection(params(limited.amqp_port))  # its own budget
    och = other.channel()
    tags = [och.basic_consume(q, lambda *a: None) for _ in range(3)]
    assert len(set(tags)) == 3
    och.queue_delete(q)
    other.close()
    conn.close()
    assert amqp_status(limited)["consumer_limit_refused"] >= 1


def test_queues_per_connection_and_in_total(limited: ServerProcess) -> None:
    a = pika.BlockingConnection(params(limited.amqp_port))
    cha = a.channel()
    for i in range(3):
        cha.queue_declare(f"lim.a{i}")
    cha.queue_declare("lim.a0")  # re-declaring an existing queue creates nothing
    with pytest.raises(ChannelClosedByBroker) as info:
        cha.queue_declare("lim.a3")
    assert info.value.reply_code == 406 and "3 queues per connection" in str(info.value)
    cha = a.channel()
    cha.queue_delete("lim.a2")
    cha.queue_declare("lim.a3")  # a deleted queue frees its place
    b = pika.BlockingConnection(params(limited.amqp_port))
    chb = b.channel()
    for i in range(3):
        chb.queue_declare(f"lim.b{i}")
    c = pika.BlockingConnection(params(limited.amqp_port))  # 6 queues exist: the total
    with pytest.raises(ChannelClosedByBroker) as info:
        c.channel().queue_declare("lim.c0")
    assert "queue limit of 6 in vhost '/' is reached" in str(info.value)
    c.close()
    for name in ("lim.a0", "lim.a1", "lim.a3"):
        cha.queue_delete(name)
    chb = b.channel()
    for i in range(3):
        chb.queue_delete(f"lim.b{i}")
    a.close()
    b.close()
    assert amqp_status(limited)["queue_limit_refused"] >= 2


def test_channels_per_connection(limited: ServerProcess) -> None:
    raw = RawClient(limited.amqp_port)
    tune = raw.handshake()
    assert tune.channel_max == 4
    for number in (1, 2, 3, 4):
        raw.open_channel(number)
    raw.method(5, spec.ChannelOpen())
    close = raw.expect_close(530)
    assert "channel_max (4)" in close.reply_text
    raw.close()
    assert amqp_status(limited)["channel_limit_refused"] >= 1


def test_limit_flags_are_parsed_and_checked() -> None:
    from oxiedge.config import Config, ConfigError

    cfg = Config.resolve({}, {"OXIEDGE_AMQP_MAX_MESSAGE_SIZE": "2MiB",
                              "OXIEDGE_AMQP_PREAUTH_MAX_SIZE": "8KiB",
                              "OXIEDGE_AMQP_HANDSHAKE_TIMEOUT": "2.5"})
    assert (cfg.amqp_max_message_size, cfg.amqp_preauth_max_size) == (2 << 20, 8 << 10)
    assert cfg.amqp_handshake_timeout == 2.5
    defaults = Config.resolve({}, {})
    assert defaults.amqp_max_message_size == 16 << 20
    assert (defaults.amqp_queue_limit, defaults.amqp_queue_bytes) == (10_000_000, 1 << 30)
    assert (defaults.amqp_memory_queue_limit, defaults.amqp_memory_queue_bytes) == (
        100_000, 64 << 20)  # a queue held in memory (exclusive, non-durable)
    assert (defaults.amqp_max_exchanges, defaults.amqp_max_bindings) == (10_000, 50_000)
    for env in ({"OXIEDGE_AMQP_PREAUTH_MAX_SIZE": "1000"},
                {"OXIEDGE_AMQP_HANDSHAKE_TIMEOUT": "0"},
                {"OXIEDGE_AMQP_MAX_QUEUES": "0"}, {"OXIEDGE_AMQP_MAX_BINDINGS": "0"},
                {"OXIEDGE_AMQP_MAX_EXCHANGES": "-1"}):
        with pytest.raises(ConfigError) as info:
            Config.resolve({}, env)
        assert next(iter(env)) in str(info.value)


def test_exchanges_and_bindings_in_total(tmp_path: Any) -> None:
    """--amqp-max-exchanges / --amqp-max-bindings: a new exchange or binding past the bound
    gets 406 on its channel; re-binding an existing binding, and everything after a delete,
    still works."""
    srv = ServerProcess(tmp_path / "data", ("--mqtt-port", "off", "--amqp-max-exchanges", "10",
                                            "--amqp-max-bindings", "4"), None).start()
    try:
        conn = pika.BlockingConnection(params(srv.amqp_port))
        ch = conn.channel()
        builtin = amqp_status(srv)["exchanges"]
        for i in range(10 - builtin):
            ch.exchange_declare(f"x{i}", "topic", durable=i % 2 == 0)
        with pytest.raises(ChannelClosedByBroker) as info:
            ch.exchange_declare("one.too.many", "fanout")
        assert info.value.reply_code == 406 and "exchange limit of 10" in str(info.value)
        ch = conn.channel()
        ch.exchange_declare("x0", "topic", durable=True)  # an existing one: fine
        ch.queue_declare("bq")
        for key in ("a", "b", "c"):
            ch.queue_bind("bq", "x0", key)
        ch.exchange_bind("x1", "x0", "a.#")  # e2e bindings count too
        ch.queue_bind("bq", "x0", "a")  # idempotent: no new binding
        with pytest.raises(ChannelClosedByBroker) as info:
            ch.queue_bind("bq", "x0", "d")
        assert info.value.reply_code == 406 and "binding limit of 4" in str(info.value)
        ch = conn.channel()
        with pytest.raises(ChannelClosedByBroker):
            ch.exchange_bind("x2", "x0", "z")
        ch = conn.channel()
        ch.queue_unbind("bq", "x0", "c")
        ch.queue_bind("bq", "x0", "d")  # a freed place is taken again
        status = amqp_status(srv)
        assert (status["exchanges"], status["bindings"]) == (10, 4)
        assert status["exchange_limit_refused"] == 1 and status["binding_limit_refused"] == 2
        ch.exchange_delete("x0")  # its 4 bindings go with it
        ch.exchange_declare("fresh", "direct")
        ch.queue_bind("bq", "fresh", "k")
        assert amqp_status(srv)["bindings"] == 1
        conn.close()
    finally:
        srv.stop()

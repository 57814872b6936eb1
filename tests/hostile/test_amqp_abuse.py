"""AMQP abuse against a real server, as a hostile client would try it (issue 14): a content
header announcing 1 TiB, bodies trickled on many channels under a memory alarm, floods of
unauthenticated or oversized handshakes, channel/queue/consumer floods and a queue filled
without a consumer. Each test measures an innocent MQTT client's PINGREQ round trip (its
own process, under 100 ms) and the broker's RSS (bounded)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable

import pika
from pika.exceptions import ChannelClosedByBroker

from oxiedge.amqp import codec, spec
from tests.amqp.conftest import params
from tests.amqp.rawclient import RawClient
from tests.conftest import ServerProcess
from tests.hostile.conftest import InnocentClient, server_status

MiB = 1 << 20
PROPS = spec.BasicProperties().encode()


def _ports(srv: ServerProcess) -> tuple[int, int]:
    assert srv.mqtt_port is not None and srv.amqp_port is not None
    return srv.mqtt_port, srv.amqp_port


def _report(name: str, stats: object, srv: ServerProcess) -> None:
    rss = srv.rss  # type: ignore[attr-defined]
    print(f"{name}: innocent client {stats}; broker RSS peak {rss.peak / MiB:.0f} MiB "
          f"(start {rss.baseline / MiB:.0f} MiB)")


def test_one_tib_content_header_is_refused_before_any_body(
        hostile_server: Callable[..., ServerProcess],
        innocent: Callable[..., InnocentClient]) -> None:
    """The issue's case: a header announcing 1 TiB, then 80 MB of body frames. The 406
    comes at once, the body frames are dropped unread (RSS stays flat), the connection
    and the innocent client carry on."""
    srv = hostile_server()
    mqtt, amqp = _ports(srv)
    with innocent(mqtt, interval=0.02) as client:
        time.sleep(0.2)
        before = srv.rss.mark()  # type: ignore[attr-defined]
        raw = RawClient(amqp, timeout=30)
        raw.handshake()
        raw.open_channel(1)
        raw.send(codec.encode_method(1, spec.BasicPublish(0, "", "q"))
                 + codec.encode_frame(2, 1, struct.pack(">HHQ", 60, 0, 1 << 40) + PROPS))
        close = raw.expect(spec.ChannelClose, 1)
        assert isinstance(close, spec.ChannelClose) and close.reply_code == 406
        chunk = codec.encode_frame(3, 1, b"\x00" * (128 * 1024 - 8))
        for _ in range(640):  # ~80 MB the client had queued before it read the 406
            raw.send(chunk)
        raw.method(1, spec.ChannelCloseOk())
        raw.open_channel(1)  # the connection is fine
        raw.call(0, spec.ConnectionClose(200, "bye", 0, 0), spec.ConnectionCloseOk)
        raw.close()
    stats = client.stop()
    grew = srv.rss.peak - before  # type: ignore[attr-defined]
    _report("1 TiB header", stats, srv)
    assert grew < 24 * MiB, f"RSS grew {grew / MiB:.0f} MiB while dropping the body"
    assert server_status(srv)["amqp"]["messages_too_large"] == 1
    stats.assert_responsive(limit_ms=100)


def test_bodies_trickled_on_many_channels_stop_at_the_memory_alarm(
        hostile_server: Callable[..., ServerProcess],
        innocent: Callable[..., InnocentClient]) -> None:
    """200 channels each start a 16 MiB message and send it 1 MiB at a time, never
    finishing one (no complete message: the old throttle never applied). The connection is
    not read once the memory alarm is on, so RSS stops near the watermark."""
    srv = hostile_server()
    mqtt, amqp = _ports(srv)
    rss0 = srv.rss.mark()  # type: ignore[attr-defined]
    watermark = rss0 + 64 * MiB
    srv.cli("limits", "--memory-high-watermark", str(watermark))
    raw = RawClient(amqp, timeout=5)
    raw.handshake()
    channels = range(1, 201)
    for number in channels:
        raw.open_channel(number)
    body = b"\x00" * (128 * 1024 - 8)
    sent = [0]
    stop = threading.Event()

    def flood() -> None:
        try:
            for number in channels:
                raw.send(codec.encode_method(number, spec.BasicPublish(0, "", "none"))
                         + codec.encode_frame(2, number,
                                              struct.pack(">HHQ", 60, 0, 16 * MiB) + PROPS))
            for _round in range(8):
                for number in channels:
                    raw.send(codec.encode_frame(3, number, body) * 8)  # 1 MiB
                    sent[0] += MiB
                    if stop.is_set():
                        return
        except OSError:
            pass  # the socket timed out: the broker stopped reading, as it should

    with innocent(mqtt, interval=0.02) as client:
        time.sleep(0.2)
        sender = threading.Thread(target=flood, daemon=True)
        sender.start()
        sender.join(20)
        stop.set()
        status = server_status(srv)
    stats = client.stop()
    _report("trickled bodies", stats, srv)
    peak = srv.rss.peak  # type: ignore[attr-defined]
    assert status["alarms"]["memory_alarm"], "the alarm should be on"
    assert sent[0] < 1600 * MiB, "the broker kept reading under the alarm"
    assert status["amqp"]["receiving_bytes"] > 0
    # Publisher input is sampled every 4 MiB: the overshoot is a few MiB, not the 1 s
    # monitor interval's worth of loopback traffic (~500 MB here before that sampling).
    assert peak < watermark + 32 * MiB, f"RSS peak {peak / MiB:.0f} MiB"
    raw.close()
    stats.assert_responsive(limit_ms=100)


def test_unauthenticated_floods_are_bounded(
        hostile_server: Callable[..., ServerProcess],
        innocent: Callable[..., InnocentClient]) -> None:
    """150 sockets announce a 1 MiB start-ok (refused from the frame header: 501), 150
    more send the protocol header and then nothing (closed at the handshake deadline).
    (Opened 25 at a time: the rate of new connections is the core limits' business.)"""
    # 300 sockets from 127.0.0.1: the per-source connection bound (default 100, tested in
    # test_core_connections.py) is lifted so that the AMQP pre-login bounds are what is hit.
    srv = hostile_server("--amqp-handshake-timeout", "1", "--max-connections-per-source", "1000")
    mqtt, amqp = _ports(srv)
    with innocent(mqtt, interval=0.02) as client:
        time.sleep(0.2)
        before = srv.rss.mark()  # type: ignore[attr-defined]
        socks: list[socket.socket] = []
        for batch in range(12):
            for _ in range(25):
                s = socket.create_connection(("127.0.0.1", amqp))
                hello = codec.PROTOCOL_HEADER
                if batch % 2 == 0:  # a frame header announcing 1 MiB, and 60 kB of it
                    hello += struct.pack(">BHI", 1, 0, MiB) + b"\x00" * 60_000
                s.sendall(hello)
                socks.append(s)
            time.sleep(0.05)
        for s in socks:  # each is closed by the server (no status polling: a CLI
            s.settimeout(10)  # process per poll would load the CPU the pings share)
            while s.recv(65536):
                pass
            s.close()
    stats = client.stop()
    _report("pre-login flood", stats, srv)
    status = server_status(srv)["amqp"]
    assert status["connections"] == 0
    assert status["preauth_too_large"] == 150
    assert status["handshake_timeouts"] == 150
    assert srv.rss.peak - before < 64 * MiB  # type: ignore[attr-defined]
    stats.assert_responsive(limit_ms=100)


def test_channel_queue_consumer_floods_stop_at_their_bounds(
        hostile_server: Callable[..., ServerProcess],
        innocent: Callable[..., InnocentClient]) -> None:
    srv = hostile_server("--amqp-max-queues-per-connection", "300",
                         "--amqp-max-consumers-per-connection", "300")
    mqtt, amqp = _ports(srv)
    with innocent(mqtt, interval=0.02) as client:
        time.sleep(0.2)
        before = srv.rss.mark()  # type: ignore[attr-defined]
        raw = RawClient(amqp, timeout=10)
        tune = raw.handshake()
        for number in range(1, tune.channel_max + 1):
            raw.method(number, spec.ChannelOpen())
        for number in range(1, tune.channel_max + 1):
            raw.expect(spec.ChannelOpenOk, number)
        raw.method(tune.channel_max + 1, spec.ChannelOpen())
        raw.expect_close(530)
        raw.close()
        conn = pika.BlockingConnection(params(amqp))
        ch = conn.channel()
        refused = None
        for i in range(400):
            try:
                ch.queue_declare(f"flood.{i}", auto_delete=False, exclusive=True)
            except ChannelClosedByBroker as exc:
                refused = (i, exc.reply_code)
                break
        assert refused == (300, 406)
        ch = conn.channel()
        consumer_refused = None
        for i in range(400):
            try:
                ch.basic_consume("flood.0", lambda *a: None)
            except ChannelClosedByBroker as exc:
                consumer_refused = (i, exc.reply_code)
                break
        assert consumer_refused == (300, 406)
        conn.close()
    stats = client.stop()
    _report("channel/queue/consumer floods", stats, srv)
    status = server_status(srv)["amqp"]
    assert status["channel_limit_refused"] == 1
    assert status["queue_limit_refused"] == 1 and status["consumer_limit_refused"] == 1
    assert status["queues"] == 0  # the exclusive ones died with their connection
    assert srv.rss.peak - before < 64 * MiB  # type: ignore[attr-defined]
    stats.assert_responsive(limit_ms=100)


def test_queue_without_consumer_is_capped_in_bytes(
        hostile_server: Callable[..., ServerProcess],
        innocent: Callable[..., InnocentClient]) -> None:
    """200 MB into one queue declared without x-max-length-bytes: the default byte cap
    (here 16 MiB) drops the oldest, RSS stays bounded."""
    srv = hostile_server("--amqp-queue-bytes", "16MiB")
    mqtt, amqp = _ports(srv)
    with innocent(mqtt, interval=0.02) as client:
        time.sleep(0.2)
        before = srv.rss.mark()  # type: ignore[attr-defined]
        conn = pika.BlockingConnection(params(amqp))
        ch = conn.channel()
        ch.queue_declare("sink")
        body = b"\x00" * (64 * 1024)
        for _ in range(3200):
            ch.basic_publish("", "sink", body)
        depth = ch.queue_declare("sink", passive=True).method.message_count
        ch.queue_delete("sink")
        conn.close()
    stats = client.stop()
    _report("byte-capped queue", stats, srv)
    assert depth == 256  # 16 MiB of 64 KiB bodies
    assert server_status(srv)["amqp"]["dropped"] == 3200 - 256
    assert srv.rss.peak - before < 96 * MiB  # type: ignore[attr-defined]
    stats.assert_responsive(limit_ms=100)


def test_topology_abuse_does_not_stall_the_broker(
        hostile_server: Callable[..., ServerProcess],
        innocent: Callable[..., InnocentClient]) -> None:
    """Session 12's audit: 20,000 topic bindings then publishes with distinct routing keys
    (each scanned every binding: ~15 ms a publish, seconds per read), an auto-delete chain
    of 2,000 exchanges deleted at once (RecursionError, connection dropped), a long
    exchange chain published through (one read held the loop for seconds). The innocent
    client stays responsive, the bounds hold and count."""
    srv = hostile_server("--amqp-max-bindings", "22000", "--amqp-max-exchanges", "2500")
    mqtt, amqp = _ports(srv)
    with innocent(mqtt, interval=0.02) as client:
        time.sleep(0.2)
        raw = RawClient(amqp, timeout=30)
        raw.handshake()
        raw.open_channel(1)
        raw.call(1, spec.QueueDeclare(queue="sink", arguments={"x-max-length": 10}),
                 spec.QueueDeclareOk)
        binds = [codec.encode_method(1, spec.QueueBind(queue="sink", exchange="amq.topic",
                                                       routing_key=f"a.{i}.*.#", nowait=True))
                 for i in range(20_000)]
        for i in range(0, len(binds), 1000):
            raw.send(b"".join(binds[i:i + 1000]))
        raw.call(1, spec.QueueDeclare(queue="sink", passive=True), spec.QueueDeclareOk)
        pubs = b"".join(codec.encode_content(1, spec.BasicPublish(
            exchange="amq.topic", routing_key=f"a.{i}.x.y"), PROPS, b"m", 131072)
            for i in range(3000))
        raw.send(pubs)
        ok = raw.call(1, spec.QueueDeclare(queue="sink", passive=True), spec.QueueDeclareOk)
        assert isinstance(ok, spec.QueueDeclareOk) and ok.message_count == 10
        raw.call(1, spec.ExchangeDeclare(exchange="d0", type="fanout"), spec.ExchangeDeclareOk)
        for i in range(1, 2000):
            raw.method(1, spec.ExchangeDeclare(exchange=f"d{i}", type="fanout",
                                               auto_delete=True, nowait=True))
            raw.method(1, spec.ExchangeBind(destination=f"d{i - 1}", source=f"d{i}",
                                            nowait=True))
        raw.call(1, spec.ExchangeDeclare(exchange="d1999", type="fanout", passive=True),
                 spec.ExchangeDeclareOk)
        raw.send(b"".join(codec.encode_content(1, spec.BasicPublish(exchange="d1999"),
                                               PROPS, b"m", 131072) for _ in range(300)))
        raw.call(1, spec.QueueBind(queue="sink", exchange="amq.topic", routing_key="b"),
                 spec.QueueBindOk)  # 20,000 + 1,999 + 1: the bound exactly
        raw.open_channel(2)
        raw.method(2, spec.QueueBind(queue="sink", exchange="amq.topic", routing_key="c"))
        refused = raw.expect(spec.ChannelClose, 2)
        assert isinstance(refused, spec.ChannelClose) and refused.reply_code == 406
        raw.method(2, spec.ChannelCloseOk())
        raw.call(1, spec.ExchangeDelete(exchange="d0"), spec.ExchangeDeleteOk)
        raw.method(1, spec.ExchangeDeclare(exchange="d1999", type="fanout", passive=True))
        close = raw.expect(spec.ChannelClose, 1)
        assert isinstance(close, spec.ChannelClose) and close.reply_code == 404
        raw.method(1, spec.ChannelCloseOk())
        raw.close()
    stats = client.stop()
    _report("topology abuse", stats, srv)
    status = server_status(srv)["amqp"]
    assert status["binding_limit_refused"] == 1
    assert status["bindings"] == 20_001 and status["exchanges"] < 20
    stats.assert_responsive(limit_ms=100)

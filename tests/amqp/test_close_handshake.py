"""The AMQP close handshake, both directions, on raw sockets against a real server (issue
18): what arrived before a close is processed and durable before close-ok; frames after it
are discarded; the socket stays open until the client closes it; a closing channel drops
its frames until its close-ok, never an error; every dropped connection is logged and
counted."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pika
import pytest

from oxiedge.amqp import codec, spec
from tests.amqp.conftest import params
from tests.amqp.rawclient import RawClient
from tests.conftest import ServerProcess

PERSISTENT = spec.BasicProperties(delivery_mode=2).encode()


def publish_bytes(channel: int, routing_key: str, body: bytes, exchange: str = "") -> bytes:
    return codec.encode_content(channel, spec.BasicPublish(0, exchange, routing_key),
                                PERSISTENT, body, 131072)


def amqp_status(srv: ServerProcess) -> dict[str, Any]:
    return dict(json.loads(srv.cli("status", "--json").stdout)["amqp"])


def depth(port: int, queue: str) -> int:
    conn = pika.BlockingConnection(params(port))
    try:
        return int(conn.channel().queue_declare(queue, passive=True).method.message_count)
    finally:
        conn.close()


def declare(raw: RawClient, queue: str) -> None:
    raw.call(1, spec.QueueDeclare(0, queue, durable=True), spec.QueueDeclareOk)


def test_publishes_before_close_are_durable_frames_after_it_discarded(
        start_server: Any) -> None:
    """One write: 2000 persistent publishes, connection.close, then 500 more publishes and
    garbage. close-ok comes, the socket stays open, and after a SIGKILL right after the
    close-ok exactly the 2000 are in the durable queue."""
    srv = start_server("--mqtt-port", "off")
    raw = RawClient(srv.amqp_port)
    raw.handshake()
    raw.open_channel()
    declare(raw, "close.before")
    before = b"".join(publish_bytes(1, "close.before", b"m%d" % i) for i in range(2000))
    after = b"".join(publish_bytes(1, "close.before", b"late") for _ in range(500))
    close = codec.encode_method(0, spec.ConnectionClose(200, "bye", 0, 0))
    raw.send(before + close + after + b"\x01garbage that is not a frame\xce" * 10)
    raw.expect(spec.ConnectionCloseOk)  # nothing else: the late frames were never answered
    raw.sock.settimeout(0.5)
    with pytest.raises(socket.timeout):  # still open: the server waits for our close
        raw.sock.recv(1)
    srv.kill()  # the power cut, right after close-ok
    raw.close()
    srv.start()
    assert depth(srv.amqp_port, "close.before") == 2000


def test_close_ok_then_server_waits_for_client_and_counts_clean(start_server: Any) -> None:
    srv = start_server("--mqtt-port", "off")
    raw = RawClient(srv.amqp_port)
    raw.handshake()
    raw.open_channel()
    raw.send(codec.encode_method(0, spec.ConnectionClose(200, "bye", 0, 0))
             + publish_bytes(1, "nowhere", b"after close"))
    raw.expect(spec.ConnectionCloseOk)
    raw.send(b"more bytes after close-ok are read and dropped")
    started = time.monotonic()
    assert raw.read_to_eof(timeout=10) == b""  # the server closes after its linger
    assert 2 <= time.monotonic() - started < 8
    status = amqp_status(srv)
    assert status["connections_closed"] == 1
    assert status["connections_dropped"] == 0 and status["connection_errors"] == 0
    assert status["published"] == 0  # the publish after the close was discarded


def test_closing_channel_discards_frames_until_close_ok(server: Any) -> None:
    """After the server's channel.close (404: no such exchange) the client keeps sending
    on that channel (a publish with body, an ack of an unknown tag, a declare, garbage
    method ids): all dropped, no connection error; close-ok ends it and the number can be
    opened again."""
    raw = RawClient(server.amqp_port)
    raw.handshake()
    raw.open_channel(1)
    raw.send(publish_bytes(1, "rk", b"x", exchange="no-such-exchange"))
    close = raw.expect(spec.ChannelClose, 1)
    assert isinstance(close, spec.ChannelClose) and close.reply_code == 404
    raw.send(publish_bytes(1, "rk", b"y" * 300_000)  # content frames of a closing channel
             + codec.encode_method(1, spec.BasicAck(999, False))
             + codec.encode_method(1, spec.QueueDeclare(0, "q"))
             + codec.encode_frame(1, 1, b"\x00\x3c\x27\x0f")  # unknown method
             + codec.encode_frame(2, 1, b"\x00")  # a header frame that is not one
             + codec.encode_method(1, spec.ChannelCloseOk()))
    raw.open_channel(1)  # works: the close handshake is over, nothing else was answered
    raw.call(1, spec.QueueDeclare(0, "", exclusive=True), spec.QueueDeclareOk)
    raw.call(0, spec.ConnectionClose(200, "bye", 0, 0), spec.ConnectionCloseOk)
    raw.close()


def test_channel_close_makes_its_publishes_durable_first(start_server: Any) -> None:
    """Publishes without confirms then channel.close in one write: close-ok is sent only
    after their records are synced (SIGKILL right after it loses none)."""
    srv = start_server("--mqtt-port", "off")
    raw = RawClient(srv.amqp_port)
    raw.handshake()
    raw.open_channel(1)
    declare(raw, "chclose.q")
    raw.send(b"".join(publish_bytes(1, "chclose.q", b"%d" % i) for i in range(1500))
             + codec.encode_method(1, spec.ChannelClose(200, "bye", 0, 0)))
    raw.expect(spec.ChannelCloseOk, 1)
    srv.kill()
    raw.close()
    srv.start()
    assert depth(srv.amqp_port, "chclose.q") == 1500


def test_server_close_waits_for_close_ok_discarding_the_rest(server: Any) -> None:
    """A connection error (channel 0 basic.qos): the server's connection.close, then the
    client's in-flight frames (even broken ones) are ignored until its close-ok."""
    raw = RawClient(server.amqp_port)
    raw.handshake()
    raw.open_channel(1)
    raw.method(0, spec.BasicQos())
    close = raw.expect(spec.ConnectionClose)
    assert isinstance(close, spec.ConnectionClose) and close.reply_code == 503
    raw.send(publish_bytes(1, "x", b"in flight") + codec.encode_method(1, spec.BasicAck(5)))
    raw.method(0, spec.ConnectionCloseOk())
    assert raw.read_to_eof() == b""
    raw.close()


def _log_lines(srv: ServerProcess, needle: str, timeout: float = 5) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        lines = [ln for ln in srv.log_lines if needle in ln]
        if lines or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def test_every_dropped_connection_is_logged_and_counted(start_server: Any) -> None:
    srv = start_server("--mqtt-port", "off", "--amqp-handshake-timeout", "0.5")
    # 1. the client vanishes without connection.close
    raw = RawClient(srv.amqp_port)
    raw.handshake()
    raw.open_channel()
    peer = "{}:{}".format(*raw.sock.getsockname()[:2])
    raw.close()
    (line,) = _log_lines(srv, peer)
    assert "connection dropped" in line and "user 'guest'" in line
    assert "without connection.close" in line
    # 2. a handshake that never completes
    silent = socket.create_connection(("127.0.0.1", srv.amqp_port))
    silent.sendall(codec.PROTOCOL_HEADER)
    peer2 = "{}:{}".format(*silent.getsockname()[:2])
    (line,) = _log_lines(srv, peer2)
    assert "handshake not completed within 0.5 s" in line
    silent.close()
    # 3. a bad protocol header
    bad = RawClient(srv.amqp_port)
    bad.send(b"GET / HTTP/1.1\r\n\r\n")
    assert bad.read_to_eof() == codec.PROTOCOL_HEADER
    bad.close()
    status = amqp_status(srv)
    assert status["connections_dropped"] == 3
    assert status["handshake_timeouts"] == 1
    # 4. a connection error: logged with its code, counted in connection_errors
    err = RawClient(srv.amqp_port)
    err.handshake()
    err.method(0, spec.BasicQos())
    err.expect_close(503)
    err.close()
    assert _log_lines(srv, "connection closed: 503")
    assert amqp_status(srv)["connection_errors"] == 1

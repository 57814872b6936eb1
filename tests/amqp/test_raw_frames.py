"""Raw sockets against a real server: bad protocol headers and bad frames close the
connection with the right reply code, and nothing else is affected."""

from __future__ import annotations

import struct
import time
from typing import Any

import pika
import pytest

from oxiedge.amqp import codec, spec
from tests.amqp.conftest import params
from tests.amqp.rawclient import RawClient
from tests.amqp.typed_headers import TYPED, typed_properties


@pytest.mark.parametrize("header", [b"AMQP\x00\x00\x08\x00", b"AMQP\x01\x01\x00\x09",
                                    b"GET / HTTP/1.1\r\n\r\n"])
def test_bad_protocol_header_gets_ours_and_close(server: Any, header: bytes) -> None:
    raw = RawClient(server.amqp_port)
    raw.send(header)
    assert raw.read_to_eof() == codec.PROTOCOL_HEADER
    raw.close()


def _frame_end(good: bytes) -> bytes:
    return good[:-1] + b"\x00"


BAD_FRAMES = [
    ("bad frame end", lambda: _frame_end(codec.encode_method(1, spec.BasicQos())), 501),
    ("unknown frame type", lambda: b"\x09" + codec.encode_method(1, spec.BasicQos())[1:], 501),
    ("heartbeat on channel 1", lambda: b"\x08\x00\x01\x00\x00\x00\x00\xce", 501),
    ("frame over frame_max", lambda: codec.encode_frame(3, 1, b"x" * 200_000), 501),
    ("truncated arguments", lambda: codec.encode_frame(1, 1, b"\x00\x3c\x00\x28\x00"), 502),
    ("bad field table", lambda: codec.encode_frame(
        1, 1, b"\x00\x32\x00\x0a\x00\x00\x01q\x00\x00\x00\x00\x03\x01aZ"), 502),
    ("unknown method", lambda: codec.encode_frame(1, 1, b"\x00\x3c\x27\x0f"), 503),
    ("connection method on channel 1",
     lambda: codec.encode_method(1, spec.ConnectionTuneOk()), 503),
    ("body without content header", lambda: codec.encode_frame(3, 1, b"abc"), 505),
    ("method inside content", lambda: codec.encode_method(1, spec.BasicPublish(routing_key="q"))
     + codec.encode_method(1, spec.BasicQos()), 505),
    ("channel not open", lambda: codec.encode_method(7, spec.BasicQos()), 504),
]


@pytest.mark.parametrize("name,make,code", BAD_FRAMES, ids=[b[0] for b in BAD_FRAMES])
def test_bad_frame_closes_with_reply_code(server: Any, name: str, make: Any, code: int) -> None:
    bystander = pika.BlockingConnection(params(server.amqp_port))
    bch = bystander.channel()
    bch.queue_declare("bystander")
    raw = RawClient(server.amqp_port)
    raw.handshake()
    raw.open_channel(1)
    raw.send(make())
    raw.expect_close(code)
    assert raw.read_to_eof() == b""
    raw.close()
    # another connection is unaffected
    bch.basic_publish("", "bystander", b"still here")
    assert bch.basic_get("bystander", auto_ack=True)[2] == b"still here"
    bystander.close()


def test_channel_error_keeps_connection(server: Any) -> None:
    raw = RawClient(server.amqp_port)
    raw.handshake()
    raw.open_channel(1)
    raw.open_channel(2)
    close = raw.call(1, spec.QueueDeclare(queue="nope", passive=True), spec.ChannelClose)
    assert isinstance(close, spec.ChannelClose) and close.reply_code == 404
    assert (close.class_id, close.method_id) == (50, 10)
    raw.method(1, spec.QueueDeclare(queue="ignored-until-close-ok"))  # ignored (spec 2.3.4)
    raw.method(1, spec.ChannelCloseOk())
    ok = raw.call(2, spec.QueueDeclare(queue="fine"), spec.QueueDeclareOk)
    assert isinstance(ok, spec.QueueDeclareOk) and ok.queue == "fine"
    raw.open_channel(1)  # the number is free again
    raw.call(0, spec.ConnectionClose(200, "bye", 0, 0), spec.ConnectionCloseOk)
    raw.close()


def test_frame_max_negotiation(server: Any) -> None:
    raw = RawClient(server.amqp_port)
    tune = raw.handshake(frame_max=4096)
    assert tune.frame_max == 131072 and tune.channel_max == 2047
    raw.open_channel(1)
    raw.send(codec.encode_frame(3, 1, b"x" * 5000))  # over the negotiated 4096
    raw.expect_close(501)
    raw.close()


def test_channel_max_bounds_open_channels(start_server: Any) -> None:
    """RabbitMQ's reading: channel_max limits how many channels are open, not their
    numbers (aiormq's suite opens channel 65535 and expects 530 past the count)."""
    srv = start_server("--amqp-channel-max", "2")
    raw = RawClient(srv.amqp_port)
    tune = raw.handshake()
    assert tune.channel_max == 2
    raw.open_channel(1)
    raw.open_channel(65535)
    raw.call(65535, spec.ChannelClose(200, "", 0, 0), spec.ChannelCloseOk)
    raw.open_channel(7)  # a slot was freed
    raw.method(9, spec.ChannelOpen())
    close = raw.expect_close(530)
    assert "channel_max" in close.reply_text
    raw.close()


def test_deliveries_respect_negotiated_frame_max(server: Any) -> None:
    raw = RawClient(server.amqp_port)
    raw.handshake(frame_max=4096)
    raw.open_channel(1)
    raw.call(1, spec.QueueDeclare(queue="fm"), spec.QueueDeclareOk)
    body = b"y" * 10000
    raw.send(codec.encode_content(1, spec.BasicPublish(routing_key="fm"), b"\x00\x00", body,
                                  4096))
    raw.method(1, spec.BasicGet(queue="fm", no_ack=True))
    # parse with a strict client-side limit: any frame over 4096 raises 501 here
    raw.parser.frame_max = 4096
    cmd = raw.recv_command()
    assert cmd is not None and isinstance(cmd.method, spec.BasicGetOk) and cmd.body == body
    raw.close()


def test_bad_credentials_closed_with_403(server: Any) -> None:
    raw = RawClient(server.amqp_port)
    raw.send(codec.PROTOCOL_HEADER)
    start = raw.expect(spec.ConnectionStart)
    assert isinstance(start, spec.ConnectionStart)
    assert start.mechanisms.split() == [b"PLAIN", b"AMQPLAIN"]
    raw.method(0, spec.ConnectionStartOk({}, "PLAIN", b"only-one-part"))
    raw.expect_close(403)
    raw.close()


def test_amqplain_login(server: Any) -> None:
    from oxiedge.amqp.fields import encode_table

    raw = RawClient(server.amqp_port)
    raw.send(codec.PROTOCOL_HEADER)
    raw.expect(spec.ConnectionStart)
    response = encode_table({"LOGIN": "guest", "PASSWORD": "guest"})[4:]
    raw.call(0, spec.ConnectionStartOk({}, "AMQPLAIN", response), spec.ConnectionTune)
    raw.close()


def test_dead_peer_detected_and_heartbeats_sent(start_server: Any) -> None:
    srv = start_server("--amqp-heartbeat", "1")
    raw = RawClient(srv.amqp_port)
    tune = raw.handshake(heartbeat=1)
    assert tune.heartbeat == 1
    started = time.monotonic()
    # We stay silent: the server heartbeats every 0.5 s, then gives up after 2 s of silence.
    assert raw.recv_command(timeout=6) is None
    elapsed = time.monotonic() - started
    assert raw.heartbeats >= 2 and 1.5 <= elapsed < 5
    assert "missed heartbeats" in srv.wait_for_line("AMQP 127.0.0.1:", timeout=5)
    raw.close()


def test_content_header_frame_vector_on_the_wire(server: Any) -> None:
    """A publish sent as hand-made bytes is delivered with the properties byte-exact."""
    raw = RawClient(server.amqp_port)
    raw.handshake()
    raw.open_channel(1)
    raw.call(1, spec.QueueDeclare(queue="bytes"), spec.QueueDeclareOk)
    props = b"\x90\x00\x0atext/plain\x02"  # content-type + delivery-mode
    header = struct.pack(">HHQ", 60, 0, 3) + props
    raw.send(codec.encode_method(1, spec.BasicPublish(routing_key="bytes"))
             + codec.encode_frame(2, 1, header) + codec.encode_frame(3, 1, b"abc"))
    raw.method(1, spec.BasicGet(queue="bytes", no_ack=True))
    cmd = raw.recv_command()
    assert cmd is not None and cmd.properties == props and cmd.body == b"abc"
    raw.close()


def test_return_precedes_confirm_and_confirms_in_order(server: Any) -> None:
    raw = RawClient(server.amqp_port)
    raw.handshake()
    raw.open_channel(1)
    raw.call(1, spec.ConfirmSelect(), spec.ConfirmSelectOk)
    raw.call(1, spec.QueueDeclare(queue="ordered", durable=True), spec.QueueDeclareOk)
    persistent = spec.BasicProperties(delivery_mode=2).encode()
    burst = [codec.encode_content(1, spec.BasicPublish(exchange="amq.direct",
                                                       routing_key="void", mandatory=True),
                                  b"\x00\x00", b"lost", 0)]
    burst += [codec.encode_content(1, spec.BasicPublish(routing_key="ordered"), persistent,
                                   b"%d" % i, 0) for i in range(100)]
    raw.send(b"".join(burst))  # one write: read by the server as one or a few bursts
    ret = raw.recv_command()
    assert ret is not None and isinstance(ret.method, spec.BasicReturn)
    assert ret.method.reply_code == 312 and ret.body == b"lost"
    confirmed = 0
    while confirmed < 101:
        cmd = raw.recv_command()
        assert cmd is not None and isinstance(cmd.method, spec.BasicAck)
        tag = cmd.method.delivery_tag
        assert tag > confirmed  # monotonic, publish order
        assert cmd.method.multiple or tag == confirmed + 1
        confirmed = tag
    raw.method(1, spec.QueueDeclare(queue="ordered", durable=True, passive=True))
    ok = raw.expect(spec.QueueDeclareOk, 1)
    assert isinstance(ok, spec.QueueDeclareOk) and ok.message_count == 100
    raw.close()


def test_consumer_rules(server: Any) -> None:
    raw = RawClient(server.amqp_port)
    raw.handshake()
    raw.open_channel(1)
    raw.call(1, spec.QueueDeclare(queue="cr"), spec.QueueDeclareOk)
    raw.method(1, spec.BasicConsume(queue="cr", consumer_tag="one", exclusive=True))
    raw.expect(spec.BasicConsumeOk, 1)
    raw.open_channel(2)
    close = raw.call(2, spec.BasicConsume(queue="cr", consumer_tag="two"), spec.ChannelClose)
    assert isinstance(close, spec.ChannelClose) and close.reply_code == 403
    raw.method(2, spec.ChannelCloseOk())
    # no-ack delivery: nothing to ack, nothing unacked
    raw.call(1, spec.BasicCancel("one"), spec.BasicCancelOk)
    raw.call(1, spec.BasicConsume(queue="cr", consumer_tag="na", no_ack=True), spec.BasicConsumeOk)
    raw.send(codec.encode_content(1, spec.BasicPublish(routing_key="cr"), b"\x00\x00", b"n", 0))
    cmd = raw.recv_command()
    assert cmd is not None and isinstance(cmd.method, spec.BasicDeliver)
    assert cmd.method.consumer_tag == "na" and cmd.body == b"n"
    raw.method(1, spec.BasicConsume(queue="cr", consumer_tag="na"))
    raw.expect_close(530)  # reused consumer tag
    raw.close()


def test_methods_on_channel_zero_are_command_invalid(server: Any) -> None:
    raw = RawClient(server.amqp_port)
    raw.handshake()
    raw.send(codec.encode_content(0, spec.BasicPublish(routing_key="x"), b"\x00\x00", b"", 0))
    raw.expect_close(503)
    raw.close()


def test_queue_delete_ok_precedes_cancel_and_deletes_are_idempotent(server: Any) -> None:
    raw = RawClient(server.amqp_port)
    raw.send(codec.PROTOCOL_HEADER)
    raw.expect(spec.ConnectionStart)
    caps = {"capabilities": {"consumer_cancel_notify": True}}
    raw.call(0, spec.ConnectionStartOk(caps, "PLAIN", b"\x00guest\x00guest"), spec.ConnectionTune)
    raw.method(0, spec.ConnectionTuneOk(0, 131072, 0))
    raw.call(0, spec.ConnectionOpen("/"), spec.ConnectionOpenOk)
    raw.open_channel(1)
    raw.call(1, spec.QueueDeclare(queue="del-order"), spec.QueueDeclareOk)
    raw.call(1, spec.BasicConsume(queue="del-order", consumer_tag="c1"), spec.BasicConsumeOk)
    raw.call(1, spec.QueueDelete(queue="del-order"), spec.QueueDeleteOk)  # first the reply...
    cancel = raw.expect(spec.BasicCancel, 1)  # ...then the notification
    assert isinstance(cancel, spec.BasicCancel) and cancel.consumer_tag == "c1"
    raw.method(1, spec.QueueDelete(queue="del-order"))  # gone already: still delete-ok
    ok = raw.expect(spec.QueueDeleteOk, 1)
    assert isinstance(ok, spec.QueueDeleteOk) and ok.message_count == 0
    raw.call(1, spec.ExchangeDelete(exchange="never-declared"), spec.ExchangeDeleteOk)
    raw.close()


def test_memory_alarm_blocks_publishers_only(start_server: Any) -> None:
    srv = start_server("--memory-high-watermark", "32MB")  # the minimum; idle RSS ~43 MB: on
    raw = RawClient(srv.amqp_port)
    raw.send(codec.PROTOCOL_HEADER)
    start = raw.expect(spec.ConnectionStart)
    assert isinstance(start, spec.ConnectionStart)
    assert start.server_properties["capabilities"]["connection.blocked"] is True
    raw.method(0, spec.ConnectionStartOk({"capabilities": {"connection.blocked": True}},
                                         "PLAIN", b"\x00guest\x00guest"))
    raw.expect(spec.ConnectionTune)
    raw.method(0, spec.ConnectionTuneOk(0, 131072, 0))
    raw.call(0, spec.ConnectionOpen("/"), spec.ConnectionOpenOk)
    blocked = raw.expect(spec.ConnectionBlocked)
    assert isinstance(blocked, spec.ConnectionBlocked) and "memory" in blocked.reason
    raw.open_channel(1)
    raw.call(1, spec.ConfirmSelect(), spec.ConfirmSelectOk)
    raw.call(1, spec.QueueDeclare(queue="alarmed"), spec.QueueDeclareOk)
    raw.send(codec.encode_content(1, spec.BasicPublish(routing_key="alarmed"), b"\x00\x00",
                                  b"p", 0))
    # The publish waits for the alarm (the first of the connection too), and nothing
    # after it is read: no confirm, no answer to this.
    raw.method(1, spec.QueueDeclare(queue="alarmed", passive=True))
    with pytest.raises(TimeoutError):
        raw.recv_command(timeout=1.0)
    # A connection that only consumes keeps working (it is what clears a memory alarm).
    other = RawClient(srv.amqp_port)
    other.handshake()
    other.open_channel(1)
    other.method(1, spec.BasicGet(queue="alarmed", no_ack=True))
    got = other.recv_command()
    assert got is not None and isinstance(got.method, spec.BasicGetEmpty)
    srv.cli("limits", "--memory-high-watermark", "0.9")  # the alarm clears
    raw.expect(spec.ConnectionUnblocked)
    raw.expect(spec.BasicAck, 1)  # the held publish, taken in
    raw.expect(spec.QueueDeclareOk, 1)
    other.method(1, spec.BasicGet(queue="alarmed", no_ack=True))
    got = other.recv_command()
    assert got is not None and isinstance(got.method, spec.BasicGetOk) and got.body == b"p"
    other.close()
    raw.close()


def test_garbage_after_handshake_never_hurts_the_server(server: Any) -> None:
    import random

    rng = random.Random(4)
    valid = codec.encode_method(1, spec.QueueDeclare(queue="g", arguments={"x": [1, {"y": 2}]}))
    for i in range(40):
        raw = RawClient(server.amqp_port)
        raw.handshake()
        raw.open_channel(1)
        if i % 2:
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
        else:  # a valid frame with a few bytes flipped: reaches the argument decoders
            mutated = bytearray(valid)
            for _ in range(3):
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
            data = bytes(mutated)
        raw.send(data + codec.HEARTBEAT_FRAME * 8)  # enough bytes to finish any header
        try:
            cmd = raw.recv_command(timeout=0.5)
        except TimeoutError:
            cmd = None  # still waiting for a (garbage-announced) huge frame: fine
        if cmd is not None and isinstance(cmd.method, spec.ConnectionClose):
            assert cmd.method.reply_code in (501, 502, 503, 504, 505, 530, 540)
        raw.close()
    c = pika.BlockingConnection(params(server.amqp_port))
    c.channel().queue_declare("survivor")
    c.close()
    assert not [line for line in server.log_lines if "connection failed" in line
                or "Traceback" in line]


def test_shutdown_sends_connection_forced(start_server: Any) -> None:
    srv = start_server()
    raw = RawClient(srv.amqp_port)
    raw.handshake()
    raw.open_channel(1)
    assert srv.stop() == 0  # SIGTERM
    close = raw.expect(spec.ConnectionClose)
    assert isinstance(close, spec.ConnectionClose) and close.reply_code == 320
    raw.close()


def test_dead_lettering_and_redelivery_keep_the_publishers_header_types(server: Any) -> None:
    """A publisher's typed headers (b, s, l, f, a non-UTF-8 S, ...) come out of a dead-letter
    hop and a quorum-queue redelivery byte for byte (the broker rewrites only its own
    headers), as from RabbitMQ; the rest of the properties too."""
    raw = RawClient(server.amqp_port)
    raw.handshake()
    raw.open_channel(1)
    raw.call(1, spec.ExchangeDeclare(exchange="types-dlx", type="fanout"),
             spec.ExchangeDeclareOk)
    raw.call(1, spec.QueueDeclare(queue="types-dead"), spec.QueueDeclareOk)
    raw.call(1, spec.QueueBind(queue="types-dead", exchange="types-dlx"), spec.QueueBindOk)
    raw.call(1, spec.QueueDeclare(queue="types-work", durable=True, arguments={
        "x-queue-type": "quorum", "x-dead-letter-exchange": "types-dlx"}), spec.QueueDeclareOk)
    props = typed_properties(b"600000")  # (100 ms could pass between two gets under load)
    raw.send(codec.encode_content(1, spec.BasicPublish(routing_key="types-work"), props,
                                  b"m", 131072))

    def get(queue: str) -> tuple[int, bytes]:
        raw.method(1, spec.BasicGet(queue=queue))
        cmd = raw.recv_command()
        assert cmd is not None and isinstance(cmd.method, spec.BasicGetOk), cmd
        assert cmd.properties is not None and cmd.body == b"m"
        return cmd.method.delivery_tag, cmd.properties

    tag, first = get("types-work")
    assert first == props  # delivered byte-exact
    raw.method(1, spec.BasicNack(delivery_tag=tag, requeue=True))
    tag, again = get("types-work")  # x-delivery-count added
    assert b"\x10x-delivery-countl" + bytes(7) + b"\x01" in again
    raw.method(1, spec.BasicReject(delivery_tag=tag, requeue=False))
    _, dead = get("types-dead")
    for out in (again, dead):
        for entry in TYPED:
            assert entry in out, entry
        o = spec.BasicProperties.decode(out)[0]
        assert (o.content_type, o.delivery_mode, o.correlation_id, o.timestamp, o.app_id) == (
            "text", 2, "cid", 42, "app")
    p = spec.BasicProperties.decode(dead)[0]
    assert p.headers is not None and p.headers["x-death"][0]["reason"] == "rejected"
    assert "x-delivery-count" not in p.headers and p.expiration is None
    raw.close()

"""SIGKILL the real server: what was confirmed survives; what was transient is gone."""

from __future__ import annotations

from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from tests.amqp.conftest import cli_rows, connect

NESTED = {"x": True, "n": None}


def confirming(srv: Any, *durable_queues: str) -> tuple[Any, Any]:
    """``(connection, channel)``: the channel in confirm mode, ``durable_queues`` declared."""
    c = connect(srv)
    ch = c.channel()
    ch.confirm_delivery()
    for name in durable_queues:
        ch.queue_declare(name, durable=True)
    return c, ch


def power_cut(srv: Any) -> str:
    """SIGKILL the server and start it again; returns its "AMQP listening on" line."""
    srv.kill()
    srv.start()
    return srv.line("AMQP listening on")


def get_all(ch: Any, queue: str) -> list[tuple[Any, Any, bytes]]:
    out: list[tuple[Any, Any, bytes]] = []
    while True:
        m, p, b = ch.basic_get(queue)
        if m is None:
            return out
        out.append((m, p, b))


def test_confirmed_persistent_messages_survive_sigkill(start_server: Any) -> None:
    srv = start_server()
    c, ch = confirming(srv, "jobs")
    ch.exchange_declare("events", "topic", durable=True)
    ch.queue_bind("jobs", "events", "job.#")
    ch.queue_declare("temp")  # transient queue
    for i in range(20):
        props = pika.BasicProperties(delivery_mode=2, content_type="application/json",
                                     correlation_id=f"corr-{i}",
                                     headers={"attempt": i, "tags": ["a", "b"], "m": NESTED})
        ch.basic_publish("events", f"job.created.{i}", b'{"i": %d}' % i, props)
    ch.basic_publish("", "jobs", b"transient", pika.BasicProperties(delivery_mode=1))
    ch.basic_publish("", "temp", b"gone", pika.BasicProperties(delivery_mode=2))
    # every publish above was confirmed (BlockingChannel waits for each ack)
    assert power_cut(srv).endswith(" - recovered 1 durable queues, 20 messages")
    c = connect(srv)
    ch = c.channel()
    msgs = get_all(ch, "jobs")
    assert [b for _m, _p, b in msgs] == [b'{"i": %d}' % i for i in range(20)]
    for i, (m, p, _b) in enumerate(msgs):
        assert m.redelivered and m.exchange == "events" and m.routing_key == f"job.created.{i}"
        assert p.content_type == "application/json" and p.correlation_id == f"corr-{i}"
        assert p.headers == {"attempt": i, "tags": ["a", "b"], "m": NESTED}
        assert p.delivery_mode == 2
    # the durable binding came back too
    ch.basic_publish("events", "job.again", b"again", pika.BasicProperties(delivery_mode=2))
    assert ch.basic_get("jobs", auto_ack=True)[2] == b"again"
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_declare("temp", passive=True)
    assert info.value.reply_code == 404
    c.close()


def test_acked_messages_are_not_redelivered(start_server: Any) -> None:
    srv = start_server()
    _c, ch = confirming(srv, "acked")
    for i in range(6):
        ch.basic_publish("", "acked", b"%d" % i, pika.BasicProperties(delivery_mode=2))
    msgs = get_all(ch, "acked")
    ch.basic_ack(msgs[2][0].delivery_tag, multiple=True)  # 0..2 acked
    ch.basic_ack(msgs[4][0].delivery_tag)  # 4 acked; 3 and 5 stay unacked
    # Acks are not confirmed in AMQP; oxiedge makes them durable before it answers the next
    # synchronous method, so one round trip is the event to wait for.
    ch.queue_declare("acked", durable=True, passive=True)
    assert power_cut(srv).endswith(" - recovered 1 durable queues, 2 messages")
    ch = connect(srv).channel()
    assert [b for _m, _p, b in get_all(ch, "acked")] == [b"3", b"5"]


def test_concurrent_declares_leave_one_record(start_server: Any) -> None:
    import threading

    srv = start_server()
    conns = [connect(srv) for _ in range(6)]
    chans = [c.channel() for c in conns]
    barrier = threading.Barrier(len(chans))
    errors: list[BaseException] = []

    def declare(ch: Any) -> None:
        try:
            barrier.wait(5)
            ch.queue_declare("shared", durable=True)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=declare, args=(ch,)) for ch in chans]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors
    for c in conns:
        c.close()
    assert power_cut(srv).endswith(" - recovered 1 durable queues, 0 messages")
    assert len(cli_rows(srv, "find", "_amqp", '{"_kind": "queue"}')) == 1


def test_deleted_queue_and_purge_leave_nothing_on_disk(start_server: Any) -> None:
    srv = start_server()
    c, ch = confirming(srv, "del", "pur")
    for q in ("del", "pur"):
        for _ in range(3):
            ch.basic_publish("", q, b"x", pika.BasicProperties(delivery_mode=2))
    ch.queue_delete("del")
    ch.queue_purge("pur")
    c.close()
    assert power_cut(srv).endswith(" - recovered 1 durable queues, 0 messages")


def test_queue_limit_drops_oldest_on_disk_too(start_server: Any) -> None:
    srv = start_server("--amqp-queue-limit", "5")
    c, ch = confirming(srv, "bounded")
    for i in range(8):
        ch.basic_publish("", "bounded", b"%d" % i, pika.BasicProperties(delivery_mode=2))
    row = next(r for r in cli_rows(srv, "queues") if r["name"] == "bounded")
    assert row["ready"] == 5 and row["dropped"] == 3
    status = srv.cli("status", "--json").stdout
    assert "dropped" in status
    c.close()
    assert power_cut(srv).endswith(" - recovered 1 durable queues, 5 messages")
    ch = connect(srv).channel()
    assert [b for _m, _p, b in get_all(ch, "bounded")] == [b"3", b"4", b"5", b"6", b"7"]


def test_stored_messages_visible_with_find(start_server: Any) -> None:
    srv = start_server()
    c, ch = confirming(srv, "shown")
    ch.basic_publish("", "shown", b"hello", pika.BasicProperties(delivery_mode=2,
                                                                 content_type="text/plain"))
    docs = cli_rows(srv, "find", "_amqp", '{"_kind": "qmsg"}')
    assert len(docs) == 1
    assert docs[0]["queue"] == "shown" and docs[0]["seq"] == 1 and docs[0]["body"] == "hello"
    assert docs[0]["properties"]["content_type"] == "text/plain"
    c.close()
    srv.stop()
    offline = cli_rows(srv, "queues")
    assert [(r["name"], r["ready"], r["durable"]) for r in offline] == [("shown", 1, True)]
    binds = cli_rows(srv, "bindings")
    assert {"exchange": "", "queue": "shown", "routing_key": "shown", "durable": True} in binds


def test_sigkill_mid_stream_loses_nothing_confirmed(start_server: Any) -> None:
    """A pipelined confirming publisher (raw frames, 64 in flight) is cut by SIGKILL; every
    message confirmed before the kill is recovered."""
    import threading

    from oxiedge.amqp import codec, spec
    from tests.amqp.rawclient import RawClient

    srv = start_server()
    raw = RawClient(srv.amqp_port)
    raw.handshake()
    raw.open_channel(1)
    raw.call(1, spec.ConfirmSelect(), spec.ConfirmSelectOk)
    raw.call(1, spec.QueueDeclare(queue="stream", durable=True), spec.QueueDeclareOk)
    props = spec.BasicProperties(delivery_mode=2, correlation_id="x").encode()
    confirmed = 0
    sent = 0
    killed = threading.Event()

    def frame(i: int) -> bytes:
        return codec.encode_content(1, spec.BasicPublish(routing_key="stream"), props,
                                    b"%08d" % i, 0)

    try:
        while not killed.is_set():
            while sent - confirmed < 64:
                raw.send(frame(sent + 1))
                sent += 1
            cmd = raw.recv_command(timeout=5)
            assert cmd is not None and isinstance(cmd.method, spec.BasicAck)
            confirmed = cmd.method.delivery_tag
            if confirmed >= 2000 and not killed.is_set():
                srv.kill()
                killed.set()
    except (OSError, AssertionError):
        assert killed.is_set()
    raw.close()
    srv.start()
    line = srv.line("AMQP listening on")
    recovered = int(line.rsplit(", ", 1)[1].split()[0])
    assert recovered >= confirmed
    ch = connect(srv).channel()
    bodies = [b for _m, _p, b in get_all(ch, "stream")]
    assert bodies[:confirmed] == [b"%08d" % i for i in range(1, confirmed + 1)]


def test_message_ttl_survives_restart(start_server: Any) -> None:
    srv = start_server()
    _c, ch = confirming(srv, "ttl-durable")
    ch.basic_publish("", "ttl-durable", b"long", pika.BasicProperties(delivery_mode=2,
                                                                    expiration="3600000"))
    ch.basic_publish("", "ttl-durable", b"short", pika.BasicProperties(delivery_mode=2,
                                                                     expiration="0"))
    docs = cli_rows(srv, "find", "_amqp", '{"_kind": "qmsg"}')
    assert sorted(d["body"] for d in docs if "expires_ms" in d) == [b"long".decode(), "short"]
    power_cut(srv)
    ch = connect(srv).channel()
    msgs = get_all(ch, "ttl-durable")
    assert [b for _m, _p, b in msgs] == [b"long"]  # the TTL-0 one expired, the long one kept
    assert msgs[0][1].expiration == "3600000"


def test_durable_exchange_to_exchange_binding_survives(start_server: Any) -> None:
    srv = start_server()
    c = connect(srv)
    ch = c.channel()
    ch.exchange_declare("src", "topic", durable=True)
    ch.exchange_declare("dst", "fanout", durable=True)
    ch.exchange_declare("tmp", "fanout")  # transient: its binding is not stored
    ch.queue_declare("e2e", durable=True)
    ch.exchange_bind("dst", "src", "a.*")
    ch.exchange_bind("tmp", "src", "#")
    ch.queue_bind("e2e", "dst")
    c.close()
    power_cut(srv)
    ch = connect(srv).channel()
    ch.confirm_delivery()
    ch.basic_publish("src", "a.b", b"via-e2e", pika.BasicProperties(delivery_mode=2))
    assert ch.basic_get("e2e", auto_ack=True)[2] == b"via-e2e"
    binds = cli_rows(srv, "bindings")
    assert {"exchange": "src", "queue": None, "destination_exchange": "dst",
            "routing_key": "a.*", "durable": True} in binds
    assert not [b for b in binds if b.get("destination_exchange") == "tmp"]


def test_durable_headers_binding_survives(start_server: Any) -> None:
    srv = start_server()
    c = connect(srv)
    ch = c.channel()
    ch.queue_declare("hq", durable=True)
    ch.queue_bind("hq", "amq.headers", arguments={"x-match": "any", "a": 1, "b": "x"})
    c.close()
    power_cut(srv)
    ch = connect(srv).channel()
    ch.basic_publish("amq.headers", "", b"hit", pika.BasicProperties(headers={"b": "x"}))
    ch.basic_publish("amq.headers", "", b"miss", pika.BasicProperties(headers={"b": "y"}))
    assert [b for _m, _p, b in get_all(ch, "hq")] == [b"hit"]

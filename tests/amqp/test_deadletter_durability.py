"""Dead-lettering, delivery counts and x-expires across SIGKILL and restart (real server)."""

from __future__ import annotations

import time
from typing import Any

import pika
from pika.exceptions import ChannelClosedByBroker

from tests.amqp.conftest import bodies, connect, wait_queue_gone


def test_sigkill_while_rejecting_loses_and_duplicates_nothing(start_server: Any) -> None:
    """dlx + "an acknowledgement means on disk" (README): rejected persistent messages move
    from the source to the dead-letter queue in one batch, so a power cut in the middle of
    a stream of rejects leaves each message in exactly one of the two queues."""
    n = 3000
    srv = start_server()
    c = connect(srv)
    ch = c.channel()
    ch.queue_declare("dl.dst", durable=True)
    ch.queue_declare("dl.src", durable=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dl.dst"})
    persistent = pika.BasicProperties(delivery_mode=2)
    for i in range(n - 1):
        ch.basic_publish("", "dl.src", b"m%05d" % i, persistent)
    confirm = c.channel()
    confirm.confirm_delivery()
    # Confirmed after everything staged before it on this connection: all n are on disk.
    confirm.basic_publish("", "dl.src", b"m%05d" % (n - 1), persistent)

    rejected = 0

    def on_message(chan: Any, method: Any, _props: Any, _body: bytes) -> None:
        nonlocal rejected
        chan.basic_reject(method.delivery_tag, requeue=False)
        rejected += 1
        if rejected == 1500:
            srv.kill()  # mid-stream: rejects in flight, staged, committed

    ch.basic_qos(prefetch_count=500)
    ch.basic_consume("dl.src", on_message)
    deadline = time.monotonic() + 30
    try:
        while srv.proc.poll() is None:
            assert time.monotonic() < deadline
            c.process_data_events(time_limit=0.05)
    except Exception:  # the connection dies with the server
        pass
    assert srv.proc.poll() is not None

    srv.start()
    c = connect(srv)
    ch = c.channel()
    src, dst = bodies(ch, "dl.src"), bodies(ch, "dl.dst")
    everything = src + dst
    assert len(everything) == n, (len(src), len(dst))
    assert sorted(everything) == [b"m%05d" % i for i in range(n)]  # no loss, no duplicate
    assert dst, "some rejects should have been committed before the kill"
    print("after the kill:", len(src), "in the source,", len(dst), "dead-lettered")
    c.close()


def test_delivery_count_survives_restart(start_server: Any) -> None:
    """quorum-queues "Poison Message Handling": the count is kept with the message, so a
    broker restart does not give a poison message fresh attempts."""
    srv = start_server()
    c = connect(srv)
    ch = c.channel()
    ch.queue_declare("pq.dlq", durable=True)
    ch.queue_declare("pq", durable=True, arguments={
        "x-queue-type": "quorum", "x-delivery-limit": 1, "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "pq.dlq"})
    ch.confirm_delivery()
    ch.basic_publish("", "pq", b"p", pika.BasicProperties(delivery_mode=2))
    m, _p, _b = ch.basic_get("pq")
    ch.basic_nack(m.delivery_tag, requeue=True)
    ch.queue_declare("pq", passive=True)  # a round trip: the staged count is synced
    srv.kill()
    srv.start()
    c = connect(srv)
    ch = c.channel()
    m, props, _b = ch.basic_get("pq")
    assert props.headers["x-delivery-count"] == 1
    ch.basic_nack(m.delivery_tag, requeue=True)
    _m, props, body = ch.basic_get("pq.dlq", auto_ack=True)
    assert body == b"p" and props.headers["x-death"][0]["reason"] == "delivery_limit"
    c.close()


def test_x_expires_lease_restarts_after_restart(start_server: Any) -> None:
    """ttl "Queue TTL": leases of durable queues restart when the server restarts; the
    queue goes once unused for x-expires after that."""
    srv = start_server()
    c = connect(srv)
    ch = c.channel()
    ch.queue_declare("lease", durable=True, arguments={"x-expires": 1500})
    c.close()
    srv.restart()
    c = connect(srv)
    c.channel().queue_declare("lease", passive=True)  # still here just after the restart
    wait_queue_gone(c, "lease", 10, 0.1, "x-expires did not delete the durable queue")
    c.close()
    srv.restart()  # and it stays deleted
    c = connect(srv)
    try:
        c.channel().queue_declare("lease", passive=True)
        raise AssertionError("the expired durable queue came back")
    except ChannelClosedByBroker as exc:
        assert exc.reply_code == 404
    c.close()


def test_overflow_at_recovery_dead_letters_without_overwriting(start_server: Any) -> None:
    """maxlength + dlx: a lower --amqp-queue-limit at restart drops the oldest messages at
    recovery and dead-letters them; their new records must not overwrite those of the
    target queue (every queue's next seq is known before anything is enqueued)."""
    srv = start_server()
    c = connect(srv)
    ch = c.channel()
    # the source first: its records come first in key order at recovery
    ch.queue_declare("rec.src", durable=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "rec.dst"})
    ch.queue_declare("rec.dst", durable=True)
    ch.confirm_delivery()
    persistent = pika.BasicProperties(delivery_mode=2)
    for i in range(3):
        ch.basic_publish("", "rec.dst", b"d%d" % i, persistent)
    for i in range(10):
        ch.basic_publish("", "rec.src", b"s%d" % i, persistent)
    c.close()
    srv.stop()
    srv.args = ("--amqp-queue-limit", "8")
    srv.start()
    srv.kill()  # what recovery moved was committed before the listener opened
    srv.start()
    c = connect(srv)
    ch = c.channel()
    assert bodies(ch, "rec.dst") == [b"d0", b"d1", b"d2", b"s0", b"s1"]
    assert bodies(ch, "rec.src") == [b"s%d" % i for i in range(2, 10)]
    c.close()


def test_alternate_exchange_survives_restart(start_server: Any) -> None:
    """ae: the alternate-exchange argument is stored with a durable exchange."""
    srv = start_server()
    c = connect(srv)
    ch = c.channel()
    ch.exchange_declare("ae.fallback", "fanout", durable=True)
    ch.queue_declare("ae.lost", durable=True)
    ch.queue_bind("ae.lost", "ae.fallback")
    ch.exchange_declare("ae.orders", "topic", durable=True,
                        arguments={"alternate-exchange": "ae.fallback"})
    c.close()
    srv.restart()
    c = connect(srv)
    ch = c.channel()
    ch.exchange_declare("ae.orders", "topic", durable=True,
                        arguments={"alternate-exchange": "ae.fallback"})  # equivalent
    ch.confirm_delivery()
    ch.basic_publish("ae.orders", "nobody.listens", b"x", pika.BasicProperties(delivery_mode=2))
    assert bodies(ch, "ae.lost") == [b"x"]
    c.close()

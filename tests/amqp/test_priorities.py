"""Priority queues (``x-max-priority``) and consumer priorities (``x-priority``) with stock
pika against a real server, as RabbitMQ runs them (rabbitmq.com/docs/priority,
/docs/consumer-priority): delivery by priority then FIFO, the cap at the queue's maximum,
head-only expiry, drop-head dropping the highest, requeue in place, order kept across a
SIGKILL; consumers of a higher priority served first while they have credit.
``oxiedge/amqp/priority.py``, ``oxiedge/amqp/selection.py``."""

from __future__ import annotations

import time
from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from tests.amqp.conftest import bodies, params, wait_until


def props(priority: int | None, **kw: Any) -> pika.BasicProperties:
    return pika.BasicProperties(priority=priority, **kw)


def publish_all(ch: Any, queue: str, items: list[tuple[bytes, int | None]], **kw: Any) -> None:
    for body, priority in items:
        ch.basic_publish("", queue, body, props(priority, **kw))


def test_delivery_by_priority_then_fifo(ch: Any) -> None:
    ch.queue_declare("prio", arguments={"x-max-priority": 5})
    publish_all(ch, "prio", [(b"none", None), (b"p1", 1), (b"p5", 5), (b"p3", 3),
                             (b"p9", 9), (b"p1b", 1), (b"p0", 0)])
    # 9 is above the queue's maximum: it counts as 5, after the p5 published before it.
    assert bodies(ch, "prio") == [b"p5", b"p9", b"p3", b"p1", b"p1b", b"none", b"p0"]


def test_requeue_goes_back_to_its_place(ch: Any) -> None:
    ch.queue_declare("prioq", arguments={"x-max-priority": 3})
    publish_all(ch, "prioq", [(b"a", 1), (b"b", 3), (b"c", 3), (b"d", 1)])
    got = [ch.basic_get("prioq") for _ in range(3)]
    assert [g[2] for g in got] == [b"b", b"c", b"a"]
    ch.basic_nack(got[2][0].delivery_tag, requeue=True)  # a
    ch.basic_nack(got[0][0].delivery_tag, requeue=True)  # b
    ch.basic_ack(got[1][0].delivery_tag)
    assert bodies(ch, "prioq") == [b"b", b"a", b"d"]


def test_expiry_only_at_the_head(ch: Any) -> None:
    ch.queue_declare("priottl", arguments={"x-max-priority": 2})
    publish_all(ch, "priottl", [(b"low", 0)], expiration="1")
    publish_all(ch, "priottl", [(b"high", 2)])
    time.sleep(0.05)
    # The expired low message waits behind the live high one (RabbitMQ: counted as ready).
    assert ch.queue_declare("priottl", passive=True).method.message_count == 2
    assert bodies(ch, "priottl") == [b"high"]  # then low reaches the head and expires


def test_max_length_drops_the_head_which_is_the_highest(ch: Any) -> None:
    ch.queue_declare("priolen", arguments={"x-max-priority": 5, "x-max-length": 2})
    publish_all(ch, "priolen", [(b"p1", 1), (b"p5", 5), (b"p3", 3)])
    assert bodies(ch, "priolen") == [b"p3", b"p1"]


@pytest.mark.parametrize("value", [256, -1, "5", True])
def test_invalid_max_priority_is_406(conn: Any, value: Any) -> None:
    with pytest.raises(ChannelClosedByBroker) as info:
        conn.channel().queue_declare("badprio", arguments={"x-max-priority": value})
    assert info.value.reply_code == 406


def test_dead_lettered_messages_keep_their_priority(ch: Any) -> None:
    ch.queue_declare("prio.dlq", arguments={"x-max-priority": 3})
    ch.queue_declare("prio.src", arguments={"x-dead-letter-exchange": "",
                                            "x-dead-letter-routing-key": "prio.dlq"})
    publish_all(ch, "prio.src", [(b"low", 1), (b"high", 3), (b"mid", 2)])
    for _ in range(3):
        method, _p, _b = ch.basic_get("prio.src")
        ch.basic_reject(method.delivery_tag, requeue=False)
    assert bodies(ch, "prio.dlq") == [b"high", b"mid", b"low"]


def test_max_priority_zero_is_a_plain_queue(ch: Any) -> None:
    ch.queue_declare("prio0", arguments={"x-max-priority": 0})
    publish_all(ch, "prio0", [(b"a", 0), (b"b", 9)])
    assert bodies(ch, "prio0") == [b"a", b"b"]


def test_priority_order_survives_sigkill(start_server: Any) -> None:
    srv = start_server()
    c = pika.BlockingConnection(params(srv.amqp_port))
    ch = c.channel()
    ch.confirm_delivery()
    ch.queue_declare("prio.dur", durable=True, arguments={"x-max-priority": 10})
    items = [(b"m%d-p%d" % (i, i % 4), i % 4) for i in range(12)]
    publish_all(ch, "prio.dur", items, delivery_mode=2)
    srv.kill()
    srv.start()
    c = pika.BlockingConnection(params(srv.amqp_port))
    ch = c.channel()
    expected = [body for body, _p in sorted(items, key=lambda it: -it[1])]  # stable: FIFO
    assert bodies(ch, "prio.dur") == expected
    c.close()


def test_consumer_priorities(conn: Any) -> None:
    setup = conn.channel()
    setup.queue_declare("cprio")
    hi, lo = conn.channel(), conn.channel()
    hi.basic_qos(prefetch_count=1)
    got: list[tuple[str, bytes]] = []
    hi.basic_consume("cprio", lambda _c, _m, _p, body: got.append(("hi", body)),
                     arguments={"x-priority": 10})
    lo.basic_consume("cprio", lambda _c, _m, _p, body: got.append(("lo", body)),
                     auto_ack=True, arguments={"x-priority": -5})
    for i in range(4):
        setup.basic_publish("", "cprio", b"%d" % i)
    wait_until(conn, lambda: len(got) == 4)
    # hi first; blocked at its prefetch of 1, lo takes the rest.
    assert got == [("hi", b"0"), ("lo", b"1"), ("lo", b"2"), ("lo", b"3")]


def test_consumers_with_credit_at_the_top_get_everything(conn: Any) -> None:
    setup = conn.channel()
    setup.queue_declare("cprio2")
    got: list[str] = []
    ch = conn.channel()
    for name, priority in (("a", 0), ("b", 7), ("c", 7), ("d", 3)):
        ch.basic_consume("cprio2", lambda _c, _m, _p, _b, n=name: got.append(n),
                         auto_ack=True, arguments={"x-priority": priority})
    for i in range(6):
        setup.basic_publish("", "cprio2", b"%d" % i)
    wait_until(conn, lambda: len(got) == 6)
    assert got == ["b", "c"] * 3  # round-robin among the highest


def test_consumer_argument_checks(server: Any) -> None:
    c = pika.BlockingConnection(params(server.amqp_port))
    c.channel().queue_declare("cprio3")
    with pytest.raises(ChannelClosedByBroker) as info:
        c.channel().basic_consume("cprio3", lambda *a: None, arguments={"x-priority": "hi"})
    assert info.value.reply_code == 406
    c.channel().basic_consume("cprio3", lambda *a: None,
                              arguments={"x-cancel-on-ha-failover": True})
    with pytest.raises((ChannelClosedByBroker, ConnectionClosedByBroker)) as info:
        c.channel().basic_consume("cprio3", lambda *a: None, arguments={"x-credit": 1})
    assert info.value.reply_code == 540

"""Durable queues with a backlog read nothing back until a delivery needs it (issue 37):
a restart reads each queue's counters, head and tail (and, where a deadline may matter,
its head record alone), not a window of every queue; and TTL expiry without a
dead-letter exchange removes an expired run from disk without reading it back.

What is read back is counted (``oxiedge status`` -> ``amqp.read_back_messages``, every
queue log's messages read back from disk), so the tests need no timing and no RSS bound.
"""

from __future__ import annotations

import json
from typing import Any

import pika

from bench.backlog_amqp import message_body, publish
from tests.amqp.conftest import bodies, cli_rows, connect, wait_until
from tests.amqp.test_queue_backlog import WINDOW, Drainer, recovered, rss_kb


def read_back(srv: Any) -> int:
    return int(json.loads(srv.cli("status", "--json").stdout)["amqp"]["read_back_messages"])


def test_a_restart_with_many_backlogs_reads_no_window_and_loses_nothing(start_server: Any
                                                                         ) -> None:
    srv = start_server()
    queues, n = 24, WINDOW + 300  # each deeper than its window
    c = connect(srv)
    ch = c.channel()
    for k in range(queues):  # a third with a queue TTL (never reached), a third priority
        args: dict[str, Any] = ({"x-message-ttl": 3_600_000} if k % 3 == 1 else
                                {"x-max-priority": 3} if k % 3 == 2 else {})
        ch.queue_declare(f"lazy.{k}", durable=True, arguments=args)
    c.close()
    for k in range(queues):
        publish(srv.amqp_port, f"lazy.{k}", range(n))
    srv.kill()
    srv.start()
    assert recovered(srv) == f"recovered {queues} durable queues, {queues * n} messages"
    print(f"RSS after the restart: {rss_kb(srv)} kB")
    assert read_back(srv) == 0  # (before: a window of each, 24 x 1,024 messages)
    c = connect(srv)
    ch = c.channel()
    for k in range(queues):  # declare-ok counts them without reading them either
        assert ch.queue_declare(f"lazy.{k}", durable=True, passive=True
                                ).method.message_count == n
    assert read_back(srv) == 0
    drainer = Drainer(srv.amqp_port, "lazy.0")  # a consumer reads its own queue
    got = drainer.take(500) + drainer.ahead  # (every one read is acknowledged)
    assert [i for i, _r in got] == list(range(len(got)))
    assert 0 < read_back(srv) <= 3 * WINDOW
    srv.kill()  # (acknowledgements not synced yet come again: nothing else does)
    srv.start()
    ch = connect(srv).channel()
    left = bodies(ch, "lazy.0")
    assert n - len(left) <= len(got)
    assert left == [message_body(i, 100) for i in range(n - len(left), n)]
    for k in range(1, queues):
        assert bodies(ch, f"lazy.{k}") == [message_body(i, 100) for i in range(n)]


def test_acknowledged_records_below_the_floor_are_not_listed(start_server: Any) -> None:
    """The acknowledged run below a queue's floor stays on disk until it is 1,024 seqs long
    (one range delete): ``oxiedge find _amqp`` starts at the floor, live and offline, and
    leaves out non-persistent messages paged to disk (a restart does not keep them)."""
    srv = start_server()
    c = connect(srv)
    ch = c.channel()
    ch.queue_declare("listed", durable=True)
    ch.queue_declare("listed.p", durable=True, arguments={"x-max-priority": 2})
    publish(srv.amqp_port, "listed", range(300))
    publish(srv.amqp_port, "listed.p", range(300))
    for q in ("listed", "listed.p"):
        for _ in range(200):
            ch.basic_get(q, auto_ack=True)
    publish(srv.amqp_port, "listed", range(300, 301))  # its confirm: the acks are on disk
    flt = '{"_kind": "qmsg", "queue": "%s"}'
    for _live_then_offline in range(2):
        for q in ("listed", "listed.p"):
            docs = cli_rows(srv, "find", "_amqp", flt % q)
            want = range(200, 301 if q == "listed" else 300)
            assert sorted(d["seq"] for d in docs) == [i + 1 for i in want], q
        srv.kill()


def status_amqp(srv: Any) -> dict[str, Any]:
    return dict(json.loads(srv.cli("status", "--json").stdout)["amqp"])


def count(srv: Any, queue: str) -> int:
    c = connect(srv)
    try:  # (declare-ok: expired heads are removed first, as RabbitMQ counts)
        return int(c.channel().queue_declare(queue, passive=True).method.message_count)
    finally:
        c.close()


def test_queue_ttl_without_dlx_expires_a_deep_queue_unread_across_sigkill(start_server: Any
                                                                         ) -> None:
    srv = start_server()
    c = connect(srv)
    ch = c.channel()
    ch.queue_declare("ttl.nodlx", durable=True, arguments={"x-message-ttl": 3000})
    ch.queue_declare("ttl.keep", durable=True)
    c.close()
    n = 4 * WINDOW
    publish(srv.amqp_port, "ttl.nodlx", range(n))
    publish(srv.amqp_port, "ttl.keep", range(10))
    srv.kill()  # before the TTL ran out (it keeps running while the server is down)
    srv.start()
    assert recovered(srv) == f"recovered 2 durable queues, {n + 10} messages"
    ch = connect(srv).channel()
    wait_until(ch.connection, lambda: count(srv, "ttl.nodlx") == 0, timeout=30)
    amqp = status_amqp(srv)
    assert amqp["read_back_messages"] == 0  # no window of it was read to expire it
    assert amqp["expired"] == n
    srv.kill()
    srv.start()
    assert recovered(srv) == "recovered 2 durable queues, 10 messages"
    ch = connect(srv).channel()
    assert bodies(ch, "ttl.keep") == [message_body(i, 100) for i in range(10)]
    publish(srv.amqp_port, "ttl.nodlx", range(n, n + 3))  # the queue goes on as before
    assert bodies(ch, "ttl.nodlx") == [message_body(i, 100) for i in range(n, n + 3)]


def test_per_message_ttl_expires_only_at_the_head_without_reading_the_run(start_server: Any
                                                                          ) -> None:
    """RabbitMQ expires a message with its own TTL only once it reaches the head: a message
    without one stops the run; what is behind it waits (and is never delivered expired)."""
    srv = start_server()
    ch = connect(srv).channel()
    ch.queue_declare("pm", durable=True)
    short = pika.BasicProperties(delivery_mode=2, expiration="300")
    keep = pika.BasicProperties(delivery_mode=2)
    for i in range(2 * WINDOW + 50):
        ch.basic_publish("", "pm", message_body(i, 100), short)
    ch.basic_publish("", "pm", b"stop", keep)
    for i in range(WINDOW):
        ch.basic_publish("", "pm", message_body(i, 100), short)
    ch.confirm_delivery()  # its confirm comes after every earlier record is on disk
    ch.basic_publish("", "pm", b"last", keep)
    srv.kill()
    srv.start()
    ch = connect(srv).channel()
    wait_until(ch.connection, lambda: count(srv, "pm") == WINDOW + 2, timeout=30)
    assert status_amqp(srv)["read_back_messages"] == 0
    assert bodies(ch, "pm") == [b"stop", b"last"]  # the run behind "stop" expired at the head



def test_an_unread_expired_run_behind_an_unacked_message_leaves_no_record(start_server: Any
                                                                          ) -> None:
    srv = start_server()
    c = connect(srv)
    ch = c.channel()
    ch.queue_declare("ttl.out", durable=True, arguments={"x-message-ttl": 1500})
    ch.queue_declare("ttl.sync", durable=True)
    publish(srv.amqp_port, "ttl.out", range(3 * WINDOW))
    held, _p, first = ch.basic_get("ttl.out")  # out, unacknowledged: older than the run
    assert first == message_body(0, 100)
    # (With a message out, each round reads ahead as for a draining consumer: that part
    # of the run is read back and expired in the window; what is left is dropped unread.)
    wait_until(c, lambda: count(srv, "ttl.out") == 0, timeout=30)
    publish(srv.amqp_port, "ttl.sync", range(1))  # its confirm: the expiry is on disk
    flt = '{"_kind": "qmsg", "queue": "ttl.out"}'
    assert [d["seq"] for d in cli_rows(srv, "find", "_amqp", flt)] == [1]
    ch.basic_ack(held.delivery_tag)
    publish(srv.amqp_port, "ttl.sync", range(1, 2))
    srv.kill()
    assert cli_rows(srv, "find", "_amqp", flt) == []  # offline: nothing left on disk
    srv.start()
    assert recovered(srv) == "recovered 2 durable queues, 2 messages"

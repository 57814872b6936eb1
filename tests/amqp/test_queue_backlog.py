"""Deep backlogs of durable AMQP queues live on their queue logs (``amqp/queuelog.py``):
delivered in order exactly once across SIGKILL, recovered without reading them, and TTL,
dead-lettering, length limits and purge work on messages that are only on disk.

The clients are raw AMQP connections (``bench/amqpwire.py``: pipelined confirmed
publishes, a consumer acknowledging each burst with ``multiple``) so a test moves tens of
thousands of messages in a few seconds; pika checks the semantics.
"""

from __future__ import annotations

import struct
from typing import Any

import pika
import pytest

from bench.amqpwire import RawAmqp, ack_frame
from bench.backlog_amqp import message_body, publish
from tests.amqp.conftest import bodies, connect, wait_until

DELIVER = struct.pack(">HH", 60, 60)
PAYLOAD = 100
WINDOW = 1024  # store.qlog.WINDOW: beyond it messages are only on disk


def body(i: int) -> bytes:
    return message_body(i, PAYLOAD)


class Drainer:
    """A consumer (prefetch 1000) that acknowledges each burst it reads (``multiple``)."""

    def __init__(self, port: int, queue: str) -> None:
        self.c = RawAmqp("127.0.0.1", port)
        self.c.qos(1000)
        self.c.consume(queue)
        self.redelivered = False
        self.ahead: list[tuple[int, bool]] = []  # read and acknowledged, not taken yet

    def take(self, n: int, timeout: float = 30) -> list[tuple[int, bool]]:
        """The next ``n`` messages as ``(i, redelivered)``."""
        while True:
            tag = 0
            for ftype, _ch, p in self.c.frames():
                if ftype == 1 and p[:4] == DELIVER:
                    t = p[4]
                    tag = struct.unpack_from(">Q", p, 5 + t)[0]
                    self.redelivered = bool(p[13 + t] & 1)
                elif ftype == 3:
                    self.ahead.append((int.from_bytes(p[:8], "big"), self.redelivered))
            if tag:
                self.c.sock.sendall(ack_frame(1, tag, True))
            if len(self.ahead) >= n:
                break
            self.c.fill(timeout)
        taken, self.ahead = self.ahead[:n], self.ahead[n:]
        return taken


def rss_kb(srv: Any) -> int:
    with open(f"/proc/{srv.proc.pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def recovered(srv: Any) -> str:
    line = srv.line("AMQP listening on")
    assert line is not None
    return line.rsplit(" - ", 1)[-1]


def test_deep_backlog_is_delivered_in_order_exactly_once_after_sigkill(start_server: Any
                                                                      ) -> None:
    srv = start_server()
    n = 30_000
    c = connect(srv)
    c.channel().queue_declare("deep", durable=True)
    c.close()
    assert publish(srv.amqp_port, "deep", range(n)) == 0
    srv.kill()
    srv.start()
    assert recovered(srv) == f"recovered 1 durable queues, {n} messages"
    got = Drainer(srv.amqp_port, "deep").take(n)
    assert [i for i, _r in got] == list(range(n))
    assert all(r for _i, r in got)  # delivered (maybe) before the restart: redelivered
    c = connect(srv)
    assert c.channel().queue_declare("deep", passive=True).method.message_count == 0


def churn(srv: Any, n: int) -> None:
    """Fill ``n``, drain 40 % while ``n / 2`` more are published, drain 30 % more, SIGKILL:
    after the restart every message not acknowledged before comes, in order, once."""
    c = connect(srv)
    c.channel().queue_declare("churn", durable=True)
    c.close()
    publish(srv.amqp_port, "churn", range(n))
    drainer = Drainer(srv.amqp_port, "churn")
    before = drainer.take(n * 4 // 10)
    publish(srv.amqp_port, "churn", range(n, n * 3 // 2))
    before += drainer.take(n * 3 // 10)
    before += drainer.ahead  # (acknowledged too)
    srv.kill()  # acks of the last bursts may not have reached the disk
    srv.start()
    c = connect(srv)
    left = c.channel().queue_declare("churn", passive=True).method.message_count
    after = Drainer(srv.amqp_port, "churn").take(left, timeout=60)
    seen_before = [i for i, _r in before]
    seen_after = [i for i, _r in after]
    k, total = len(seen_before), n * 3 // 2
    assert seen_before == list(range(k)) and k >= n * 7 // 10
    # an acknowledged one may come again if its ack had not reached the disk
    assert seen_after == sorted(set(seen_after)) and seen_after[k - total:] == list(
        range(k, total))


def test_sigkill_while_draining_and_refilling_loses_and_repeats_nothing(start_server: Any
                                                                       ) -> None:
    churn(start_server(), 10_000)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_sigkill_while_draining_and_refilling_a_deep_backlog(start_server: Any) -> None:
    churn(start_server(), 1_000_000)  # issue 37's depth (a durable queue's bounds are disk-sized)


def test_ttl_expires_a_deep_queue_into_its_dead_letter_queue(start_server: Any) -> None:
    srv = start_server()
    c = connect(srv)
    ch = c.channel()
    ch.queue_declare("ttl.dead", durable=True)
    ch.queue_declare("ttl.deep", durable=True, arguments={
        "x-message-ttl": 300, "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "ttl.dead"})
    n = 3 * WINDOW
    publish(srv.amqp_port, "ttl.deep", range(n))
    wait_until(c, lambda: ch.queue_declare("ttl.dead", passive=True).method.message_count == n,
               timeout=30)
    assert ch.queue_declare("ttl.deep", passive=True).method.message_count == 0
    _m, props, first = ch.basic_get("ttl.dead", auto_ack=True)
    assert first == body(0) and props.headers["x-death"][0]["reason"] == "expired"


def test_max_length_drops_disk_resident_heads_to_the_dead_letter_queue(start_server: Any
                                                                      ) -> None:
    srv = start_server()
    c = connect(srv)
    ch = c.channel()
    ch.queue_declare("ml.dead", durable=True)
    ch.queue_declare("ml", durable=True, arguments={
        "x-max-length": 2 * WINDOW, "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "ml.dead"})
    ch.queue_declare("ml.reject", durable=True, arguments={
        "x-max-length": 2 * WINDOW, "x-overflow": "reject-publish"})
    n = 5 * WINDOW
    publish(srv.amqp_port, "ml", range(n))
    assert publish(srv.amqp_port, "ml.reject", range(n)) == n - 2 * WINDOW
    srv.kill()
    srv.start()
    c = connect(srv)
    ch = c.channel()
    assert bodies(ch, "ml.dead") == [body(i) for i in range(n - 2 * WINDOW)]
    assert bodies(ch, "ml") == [body(i) for i in range(n - 2 * WINDOW, n)]
    assert bodies(ch, "ml.reject") == [body(i) for i in range(2 * WINDOW)]


def test_purge_and_requeue_on_a_deep_queue(start_server: Any) -> None:
    srv = start_server()
    c = connect(srv)
    ch = c.channel()
    ch.queue_declare("pq", durable=True)
    n = 4 * WINDOW
    publish(srv.amqp_port, "pq", range(n))
    publish(srv.amqp_port, "pq", range(n, n + 10), persistent=False)
    m1, _p, b1 = ch.basic_get("pq")
    m2, _p, b2 = ch.basic_get("pq")
    ch.basic_nack(m1.delivery_tag, requeue=True)  # back to its place, redelivered
    m3, _p, b3 = ch.basic_get("pq", auto_ack=True)
    assert (b1, b2, b3) == (body(0), body(1), body(0)) and m3.redelivered
    ch.basic_ack(m2.delivery_tag)
    assert ch.queue_purge("pq").method.message_count == n + 10 - 2
    srv.kill()
    srv.start()
    c = connect(srv)
    assert c.channel().queue_declare("pq", passive=True).method.message_count == 0


def test_a_requeued_message_older_than_every_unacked_one_survives_sigkill(start_server: Any
                                                                         ) -> None:
    srv = start_server()
    c = connect(srv)
    ch = c.channel()
    ch.queue_declare("rq", durable=True)
    ch.queue_declare("rq.sync", durable=True)
    publish(srv.amqp_port, "rq", range(3))
    got = [ch.basic_get("rq") for _ in range(3)]
    ch.basic_nack(got[0][0].delivery_tag, requeue=True)  # 0 waits again, 2 is still out
    ch.basic_ack(got[1][0].delivery_tag)  # must not move the queue's floor past 0
    publish(srv.amqp_port, "rq.sync", range(1))  # its confirm: the ack's round is on disk
    srv.kill()
    srv.start()
    assert bodies(connect(srv).channel(), "rq") == [body(0), body(2)]


def test_a_restart_counts_only_the_messages_it_finds(start_server: Any) -> None:
    """Non-persistent messages kept in the window without a record are not in the
    counters: a restarted queue reports what it holds, and is empty once drained."""
    srv = start_server()
    c = connect(srv)
    c.channel().queue_declare("mixed", durable=True)
    c.close()
    publish(srv.amqp_port, "mixed", range(1))
    publish(srv.amqp_port, "mixed", range(1, 3), persistent=False)
    publish(srv.amqp_port, "mixed", range(3, 4))
    srv.kill()
    srv.start()
    assert recovered(srv) == "recovered 1 durable queues, 2 messages"
    ch = connect(srv).channel()
    assert ch.queue_declare("mixed", passive=True).method.message_count == 2
    assert bodies(ch, "mixed") == [body(0), body(3)]
    assert ch.queue_declare("mixed", passive=True).method.message_count == 0


def test_priority_levels_on_disk_keep_their_order_across_sigkill(start_server: Any) -> None:
    srv = start_server()
    c = connect(srv)
    ch = c.channel()
    ch.queue_declare("prio", durable=True, arguments={"x-max-priority": 5})
    n = 2 * WINDOW
    for i in range(n):  # low first, deeper than a window, then high ones
        ch.basic_publish("", "prio", body(i), pika.BasicProperties(delivery_mode=2))
    for i in range(n, n + WINDOW + 10):
        ch.basic_publish("", "prio", body(i), pika.BasicProperties(delivery_mode=2,
                                                                    priority=3))
    ch.confirm_delivery()  # its confirm comes after every earlier publish is on disk
    ch.basic_publish("", "prio", body(-1 & 0xFF), pika.BasicProperties(delivery_mode=2,
                                                                        priority=9))
    srv.kill()
    srv.start()
    assert recovered(srv) == f"recovered 1 durable queues, {n + WINDOW + 11} messages"
    c = connect(srv)
    ch = c.channel()
    got = bodies(ch, "prio")
    high = [body(255)] + [body(i) for i in range(n, n + WINDOW + 10)]
    assert got == high + [body(i) for i in range(n)]


def test_a_level_left_with_only_the_last_runs_transient_messages_hides_no_lower_one(
        start_server: Any) -> None:
    """After a restart the records of non-persistent messages paged to disk are skipped:
    higher levels holding only those must not make the queue look empty."""
    srv = start_server()
    c = connect(srv)
    ch = c.channel()
    ch.queue_declare("prio2", durable=True, arguments={"x-max-priority": 5})
    for level in (3, 4, 5):  # beyond each level's window: paged, marked transient
        for i in range(WINDOW + 10):
            ch.basic_publish("", "prio2", body(i), pika.BasicProperties(priority=level))
    ch.confirm_delivery()  # its confirm comes after every earlier record is on disk
    ch.basic_publish("", "prio2", body(255), pika.BasicProperties(delivery_mode=2))
    srv.kill()
    srv.start()
    ch = connect(srv).channel()
    got = ch.basic_get("prio2", auto_ack=True)
    assert got[2] == body(255)


def test_a_publish_that_dead_letters_back_into_its_queue_keeps_its_record(
        start_server: Any) -> None:
    """Two queues at x-max-length dead-letter into each other: the head dropped from "a"
    pushes "b"'s head back into "a" while the new message is on its way into "a"."""
    srv = start_server()
    c = connect(srv)
    ch = c.channel()
    for name, other in (("a", "b"), ("b", "a")):
        ch.queue_declare(name, durable=True, arguments={
            "x-max-length": 1, "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": other})
    c.close()
    publish(srv.amqp_port, "b", range(1))
    publish(srv.amqp_port, "a", range(1, 3))  # 2 drops 1 into b, which drops 0 into a
    srv.kill()
    srv.start()
    # a held 0 and 2 (its limit passed while 2 was on its way): the restart trims its
    # head, 0, which is dropped (back into b, where it came from, would be a cycle).
    ch = connect(srv).channel()
    assert (bodies(ch, "a"), bodies(ch, "b")) == ([body(2)], [body(1)])


@pytest.mark.slow
def test_200k_backlog_rss_stays_flat_and_restart_reads_no_message(start_server: Any
                                                                  ) -> None:
    srv = start_server()  # (a durable queue's default bounds are disk-sized)
    n = 200_000
    c = connect(srv)
    c.channel().queue_declare("big", durable=True)
    c.close()
    idle = rss_kb(srv)
    publish(srv.amqp_port, "big", range(n))
    full = rss_kb(srv)
    srv.kill()
    srv.start()
    assert recovered(srv) == f"recovered 1 durable queues, {n} messages"
    restarted = rss_kb(srv)
    got = Drainer(srv.amqp_port, "big").take(n, timeout=60)
    assert [i for i, _r in got] == list(range(n))
    # the old in-memory queue held ~490 B per message; bodies alone are 100 B
    print(f"RSS kB idle {idle}, full {full}, after SIGKILL + restart {restarted}")
    assert (full - idle) * 1024 / n < 160, (idle, full)
    assert restarted < idle + 40_000, (idle, restarted)

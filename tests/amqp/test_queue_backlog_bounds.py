"""The bounds of AMQP queues sized for the card (issue 37): a durable queue, paged to disk,
takes disk-sized defaults (10 M messages / 1 GiB); a queue held in memory (non-durable,
exclusive) keeps RAM-sized ones (100,000 / 64 MiB); and the bytes of the paged queues count
with MQTT's persistent sessions in the one ``--max-backlog-bytes`` budget, where a drop-head
queue drops its oldest and a reject-publish queue refuses (both counted).

Raw pipelined publishers (``bench/amqpwire.py``) move the 100,000+ messages in seconds.
"""

from __future__ import annotations

import json
from typing import Any

import pika

from bench.backlog_amqp import publish
from tests.amqp.conftest import connect
from tests.mqtt.rawclient import RawSession, offline_subscriber

DEFAULT_MEMORY_LIMIT = 100_000  # --amqp-memory-queue-limit


def status(srv: Any) -> dict[str, Any]:
    return dict(json.loads(srv.cli("status", "--json").stdout))


def first_index(ch: Any, queue: str) -> int:
    """The index (``message_body``'s first 8 bytes) of the queue's head, left in place."""
    _m, _p, body = ch.basic_get(queue, auto_ack=False)
    assert body is not None
    ch.basic_recover(requeue=True)
    return int.from_bytes(body[:8], "big")


def test_durable_queue_outgrows_the_memory_bound_a_memory_queue_does_not(start_server: Any
                                                                          ) -> None:
    srv = start_server("--mqtt-port", "off")
    n = DEFAULT_MEMORY_LIMIT + 100
    c = connect(srv)
    ch = c.channel()
    ch.queue_declare("deep", durable=True)
    ch.queue_declare("mem", durable=False)
    c.close()
    assert publish(srv.amqp_port, "deep", range(n), payload=16) == 0
    assert publish(srv.amqp_port, "mem", range(n), persistent=False, payload=16) == 0
    c = connect(srv)
    ch = c.channel()
    assert ch.queue_declare("deep", passive=True).method.message_count == n
    assert ch.queue_declare("mem", passive=True).method.message_count == DEFAULT_MEMORY_LIMIT
    assert first_index(ch, "deep") == 0
    assert first_index(ch, "mem") == 100  # the oldest hundred were dropped
    c.close()
    amqp = status(srv)["amqp"]
    assert (amqp["queue_limit"], amqp["queue_bytes_default"]) == (10_000_000, 1 << 30)
    assert (amqp["memory_queue_limit"], amqp["memory_queue_bytes_default"]) == (
        DEFAULT_MEMORY_LIMIT, 64 << 20)
    assert amqp["dropped"] == 100 and amqp["dropped_backlog_bytes"] == 0
    assert amqp["backlog_bytes"] == 16 * n  # the durable queue's bodies, not the memory one's
    assert amqp["max_backlog_source"].startswith("0.5 of the data filesystem (")


def test_one_budget_for_amqp_and_mqtt(start_server: Any) -> None:
    srv = start_server("--max-backlog-bytes", "1MB")
    offline_subscriber(srv.mqtt_port, "offline", "t/#")
    pub = RawSession(srv.mqtt_port)
    pub.connect("pub")
    for i in range(300):
        pub.publish("t/1", b"m" * 1000, 1, pid=i + 1)
    mqtt_bytes = 300 * (3 + 1000)
    assert status(srv)["mqtt"]["backlog_bytes"] == mqtt_bytes

    c = connect(srv)
    ch = c.channel()
    ch.queue_declare("dh", durable=True)
    ch.queue_declare("rp", durable=True, arguments={"x-overflow": "reject-publish"})
    ch.queue_declare("mem", durable=False)  # held in memory: not in the budget
    c.close()
    # drop-head at the budget: the AMQP queue drops its oldest, the MQTT session keeps all
    assert publish(srv.amqp_port, "dh", range(900), payload=1000) == 0
    kept = (1_000_000 - mqtt_bytes) // 1000
    c = connect(srv)
    ch = c.channel()
    assert ch.queue_declare("dh", passive=True).method.message_count == kept
    assert first_index(ch, "dh") == 900 - kept
    st = status(srv)
    assert st["amqp"]["dropped_backlog_bytes"] == 900 - kept
    assert st["amqp"]["backlog_bytes"] == kept * 1000
    assert st["mqtt"]["backlog_bytes"] == mqtt_bytes and st["mqtt"]["dropped"] == 0
    # reject-publish at the budget: refused (nacked), counted
    assert publish(srv.amqp_port, "rp", range(10), payload=1000) == 10
    assert ch.queue_declare("rp", passive=True).method.message_count == 0
    assert status(srv)["amqp"]["rejected_backlog_bytes"] == 10
    # a queue held in memory is bounded by its own bounds, not the budget
    assert publish(srv.amqp_port, "mem", range(300), persistent=False, payload=1000) == 0
    assert ch.queue_declare("mem", passive=True).method.message_count == 300
    # the MQTT session, with AMQP's bytes counted, drops its oldest as it queues
    for i in range(10):
        pub.publish("t/1", b"n" * 1000, 1, pid=i + 1)
    st = status(srv)
    assert st["mqtt"]["dropped_backlog_bytes"] == 10
    assert st["mqtt"]["backlog_bytes"] + st["amqp"]["backlog_bytes"] <= 1_000_000
    # room again once the drop-head queue is purged: the reject-publish queue takes them
    ch.queue_purge("dh")
    assert publish(srv.amqp_port, "rp", range(10), payload=1000) == 0
    assert ch.queue_declare("rp", passive=True).method.message_count == 10
    c.close()
    pub.close()
    text = srv.cli("status").stdout
    assert "backlog budget (--max-backlog-bytes)" in text and "of 976.6 KiB" in text, text
    for proto in ("mqtt", "amqp"):
        assert status(srv)[proto]["max_backlog_bytes"] == 1_000_000


def test_lowered_queue_limit_bounds_memory_queues_too(start_server: Any) -> None:
    """``--amqp-queue-limit`` below the memory bound caps both kinds (as before)."""
    srv = start_server("--mqtt-port", "off", "--amqp-queue-limit", "50")
    c = connect(srv)
    ch = c.channel()
    ch.queue_declare("d", durable=True)
    ch.queue_declare("m", durable=False)
    ch.queue_declare("x", durable=True, arguments={"x-max-length": 1000})
    c.close()
    for q in ("d", "m", "x"):
        assert publish(srv.amqp_port, q, range(80), payload=16) == 0
    c = connect(srv)
    ch = c.channel()
    assert [ch.queue_declare(q, passive=True).method.message_count
            for q in ("d", "m", "x")] == [50, 50, 50]
    c.close()



def test_budget_drops_the_head_of_a_durable_priority_queue(start_server: Any) -> None:
    """A priority queue's levels share the budget: its head (highest level first) goes."""
    srv = start_server("--mqtt-port", "off", "--max-backlog-bytes", "1MB")
    c = connect(srv)
    ch = c.channel()
    ch.queue_declare("prio", durable=True, arguments={"x-max-priority": 5})
    for i in range(1100):
        ch.basic_publish("", "prio", i.to_bytes(8, "big") + b"." * 992,
                         pika.BasicProperties(priority=5 if i < 100 else 1, delivery_mode=2))
    count = ch.queue_declare("prio", passive=True).method.message_count
    assert count == 1000  # 1,000,000 bytes of 1000-byte bodies
    # the 100 of priority 5 were the head, dropped first: the head is now the oldest at 1
    assert first_index(ch, "prio") == 100
    c.close()
    amqp = status(srv)["amqp"]
    assert amqp["dropped_backlog_bytes"] == 100 and amqp["backlog_bytes"] == 1_000_000
    text = srv.cli("status").stdout
    assert "backlog budget (--max-backlog-bytes)" in text, text

"""``oxiedge serve --busy-poll-us``: a real server with the busy-poll on serves MQTT and AMQP
traffic exactly as without it, spins while requests come back to back, and says so in
``oxiedge status``. (What it buys is measured in bench/README.md, never asserted here.)"""

from __future__ import annotations

import json
from typing import Any

import pika

from tests.amqp.conftest import params
from tests.mqtt.rawclient import RawSession


def _hot_loop_status(server: Any) -> dict[str, Any]:
    return dict(json.loads(server.cli("status", "--json").stdout)["hot_loop"])


def test_busy_poll_serves_mqtt_and_amqp_and_reports_its_spins(start_server: Any) -> None:
    srv = start_server("--busy-poll-us", "1000")
    assert any("busy-poll on - up to 1000 µs" in line for line in srv.log_lines)
    sub, pub = RawSession(srv.mqtt_port), RawSession(srv.mqtt_port)
    try:
        sub.connect("bp-sub")
        assert sub.subscribe(1, ("bp/t", 1)) == (1,)
        pub.connect("bp-pub")
        for i in range(1, 501):  # sequential QoS 1: each PUBACK before the next PUBLISH
            pub.publish("bp/t", b"m%d" % i, 1, pid=i)
        got = [sub.receive().payload for _ in range(500)]
        assert got == [b"m%d" % i for i in range(1, 501)]
        sub.ping()
    finally:
        sub.close()
        pub.close()

    conn = pika.BlockingConnection(params(srv.amqp_port))
    try:
        ch = conn.channel()
        ch.queue_declare("bp-q", durable=True)
        ch.confirm_delivery()
        for i in range(100):  # persistent, each confirmed (a sync each: no spin meanwhile)
            ch.basic_publish("", "bp-q", b"a%d" % i,
                             pika.BasicProperties(delivery_mode=2), mandatory=True)
        bodies = []
        for _ in range(100):
            method, _props, body = ch.basic_get("bp-q")
            assert method is not None
            ch.basic_ack(method.delivery_tag)
            bodies.append(body)
        assert bodies == [b"a%d" % i for i in range(100)]
    finally:
        conn.close()

    status = _hot_loop_status(srv)
    assert status["busy_poll_us"] == 1000
    # How many of the 600 requests were served inline depends on the machine's load (one that
    # finds the loop busy goes the ordinary way); that they are counted is what this checks.
    assert status["served_inline"] > 0
    # (how many waits spun depends on how fast this machine's client answers: the gate is
    # tested in test_hot.py; here only that the count is reported)
    assert isinstance(status["busy_polls"], int)


def test_busy_poll_is_off_by_default(server: Any) -> None:
    assert not any("busy-poll" in line for line in server.log_lines)
    status = _hot_loop_status(server)
    assert status["busy_poll_us"] == 0 and status["busy_polls"] == 0


def test_busy_poll_ignored_without_the_hot_loop(start_server: Any) -> None:
    srv = start_server("--busy-poll-us", "100", env={"OXIEDGE_HOT_LOOP": "0"})
    assert any("--busy-poll-us 100 ignored: no hot loop" in line for line in srv.log_lines)
    sess = RawSession(srv.mqtt_port)
    try:
        sess.connect("bp-off")
        sess.publish("bp/x", b"x", 1, pid=7)
    finally:
        sess.close()
    assert _hot_loop_status(srv) == {"on": False, "reason": "OXIEDGE_HOT_LOOP=0"}

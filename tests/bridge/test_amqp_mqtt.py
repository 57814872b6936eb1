"""MQTT ⇄ AMQP through amq.topic against a real server, with paho, pika and SIGKILL."""

from __future__ import annotations

import json
import queue
from collections.abc import Callable

import pika
import pytest

from oxiedge.topicmap import mqtt_to_routing_key, routing_key_to_mqtt
from tests.bridge.conftest import Mqtt, amqp, consume, find, publish_until_killed, status
from tests.conftest import ServerProcess

Start = Callable[..., ServerProcess]


def test_name_translation() -> None:
    assert mqtt_to_routing_key("sensors/t1/temp") == "sensors.t1.temp"
    assert mqtt_to_routing_key("plant:7/temp:c") == "plant:7.temp:c"
    for bad in ("a.b/c", "a//b", "/a", "a/", "$SYS/x", "x" * 256):
        assert mqtt_to_routing_key(bad) is None, bad
    assert routing_key_to_mqtt("devices.valve7.cmd") == "devices/valve7/cmd"
    for bad in ("", "a/b", "a..b", ".a", "a.", "a.#", "a.+.b", "$SYS.x", "a\x00b"):
        assert routing_key_to_mqtt(bad) is None, bad


def _declare_worker_queue(port: int) -> None:
    with amqp(port) as conn:
        ch = conn.channel()
        ch.queue_declare("worker", durable=True)
        ch.queue_bind("worker", "amq.topic", "sensors.#")


def test_readings_reach_an_offline_worker_in_order_after_sigkill(start_server: Start) -> None:
    server = start_server()
    _declare_worker_queue(server.amqp_port)  # the worker is now offline
    sensor = Mqtt(server.mqtt_port, "sensor-1")
    try:
        mids = [sensor.publish("sensors/t1/temp", json.dumps({"seq": i}), 1) for i in range(100)]
        sensor.publish("sensors/t1/temp", b"transient", 0)  # QoS 0: delivery_mode 1
        mids.append(sensor.publish("sensors/t1/temp", json.dumps({"seq": 100}), 1))
        sensor.wait_acked(mids)
    finally:
        sensor.close()
    # More readings, and the power cut while they stream in: every PUBACK promised the
    # queue's copy was on disk.
    acked = publish_until_killed(server, "sensors/t2/temp", 3000)
    server.start()
    assert "recovered 1 durable queues" in str(server.line("AMQP listening"))
    # The durable binding survived too: a reading published after the restart arrives last.
    sensor = Mqtt(server.mqtt_port, "sensor-1")
    try:
        sensor.wait_acked([sensor.publish("sensors/t1/temp", b'{"after": "restart"}', 1)])
    finally:
        sensor.close()
    with amqp(server.amqp_port) as conn:
        got = consume(conn.channel(), "worker", 3102, idle=1.0)
    assert got.pop()[2] == b'{"after": "restart"}'
    first, rest = got[:101], got[101:]
    # The transient copy did not survive the power cut; every QoS 1 reading did, in order.
    assert [json.loads(b)["seq"] for _m, _p, b in first] == list(range(101))
    assert all(m.routing_key == "sensors.t1.temp" and m.exchange == "amq.topic"
               for m, _p, _b in first)
    assert all(p.delivery_mode == 2 for _m, p, _b in first + rest)
    seqs = [json.loads(b)["seq"] for _m, _p, b in rest]
    assert seqs == sorted(set(seqs))  # in publish order, no duplicates
    missing = sorted(set(acked.values()) - set(seqs))
    assert not missing, f"{len(missing)} acknowledged readings lost, e.g. {missing[:5]}"


def test_transient_reading_to_a_live_worker(start_server: Start) -> None:
    server = start_server()
    with amqp(server.amqp_port) as conn:
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(q, "amq.topic", "sensors.*.humidity")
        sensor = Mqtt(server.mqtt_port)
        try:
            sensor.publish("sensors/h1/humidity", b"55", 0)
            sensor.wait_acked([sensor.publish("sensors/h1/humidity", b"56", 1)])
        finally:
            sensor.close()
        got = consume(ch, q, 2)
    assert [(b, p.delivery_mode) for _m, p, b in got] == [(b"55", 1), (b"56", 2)]


def test_command_from_pika_reaches_mqtt_subscribers(start_server: Start) -> None:
    server = start_server()
    valve = Mqtt(server.mqtt_port, "valve7")
    low = Mqtt(server.mqtt_port, "dash")
    try:
        assert valve.subscribe("devices/+/cmd", 1) == [1]
        assert low.subscribe("devices/valve7/#", 0) == [0]
        with amqp(server.amqp_port) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_publish("amq.topic", "devices.valve7.cmd", b'{"open": true}',
                             pika.BasicProperties(delivery_mode=2))
            ch.basic_publish("amq.topic", "devices.valve7.cmd", b'{"open": false}',
                             pika.BasicProperties(delivery_mode=1))
        first, second = valve.get(), valve.get()
        assert (first.topic, first.payload, first.qos) == ("devices/valve7/cmd",
                                                          b'{"open": true}', 1)
        assert (second.payload, second.qos) == (b'{"open": false}', 0)  # transient → QoS 0
        capped = [low.get(), low.get()]
        assert [m.qos for m in capped] == [0, 0]  # capped by the granted QoS
    finally:
        valve.close()
        low.close()


def test_command_to_an_offline_persistent_session_survives_sigkill(start_server: Start) -> None:
    server = start_server("--ingest", "devices/+/cmd:commands")
    valve = Mqtt(server.mqtt_port, "valve7", clean=False)
    assert valve.subscribe("devices/+/cmd", 1) == [1]
    valve.close()
    with amqp(server.amqp_port) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        # mandatory: no AMQP queue is bound, but the MQTT session's durable copy counts
        # as routed (an unroutable mandatory publish would raise UnroutableError here).
        for n in range(5):
            ch.basic_publish("amq.topic", "devices.valve7.cmd", json.dumps({"n": n}).encode(),
                             pika.BasicProperties(delivery_mode=2), mandatory=True)
    server.kill()  # the confirms promised the MQTT session's copies are on disk
    server.start()
    valve = Mqtt(server.mqtt_port, "valve7", clean=False)
    try:
        got = [valve.get() for _ in range(5)]
    finally:
        valve.close()
    assert [json.loads(m.payload)["n"] for m in got] == list(range(5))
    assert {m.topic for m in got} == {"devices/valve7/cmd"} and {m.qos for m in got} == {1}
    # Bridged into MQTT, the commands were ingested too, durably before the confirms.
    docs = find(server, "commands", "--sort", "_id")
    assert [(d["n"], d["_topic"]) for d in docs] == [(n, "devices/valve7/cmd") for n in range(5)]


def test_no_loop_back_and_untranslatable_names_are_counted(start_server: Start) -> None:
    server = start_server()
    watcher = Mqtt(server.mqtt_port, "watcher")
    try:
        watcher.subscribe("#", 1)
        with amqp(server.amqp_port) as conn:
            ch = conn.channel()
            q = ch.queue_declare("", exclusive=True).method.queue
            ch.queue_bind(q, "amq.topic", "#")
            ch.confirm_delivery()
            sensor = Mqtt(server.mqtt_port, "sensor")
            try:
                mids = [sensor.publish("loop/mqtt", b"from-mqtt", 1),
                        sensor.publish("a.b/c", b"dotted", 1),
                        sensor.publish("x//y", b"empty-level", 1)]
                sensor.wait_acked(mids)
            finally:
                sensor.close()
            ch.basic_publish("amq.topic", "loop.amqp", b"from-amqp",
                             pika.BasicProperties(delivery_mode=2))
            ch.basic_publish("amq.topic", "a/b", b"slashed", pika.BasicProperties())
            ch.basic_publish("amq.topic", "end", b"end", pika.BasicProperties(delivery_mode=2))
            amqp_side = [(m.routing_key, b) for m, _p, b in consume(ch, q, 4)]
        mqtt_side = []
        while True:
            msg = watcher.get()
            mqtt_side.append((msg.topic, msg.payload))
            if msg.payload == b"end":
                break
        with pytest.raises(queue.Empty):
            watcher.get(timeout=0.5)  # nothing after the marker either
    finally:
        watcher.close()
    # Each message exactly once on each side; nothing came back to where it started.
    assert amqp_side == [("loop.mqtt", b"from-mqtt"), ("loop.amqp", b"from-amqp"),
                         ("a/b", b"slashed"), ("end", b"end")]
    assert mqtt_side == [("loop/mqtt", b"from-mqtt"), ("a.b/c", b"dotted"),
                         ("x//y", b"empty-level"), ("loop/amqp", b"from-amqp"), ("end", b"end")]
    bridge = status(server)["mqtt_amqp"]
    assert bridge["skipped_mqtt_topics"] == 2 and bridge["skipped_amqp_keys"] == 1
    assert bridge["mqtt_to_amqp"] == 1 and bridge["amqp_to_mqtt"] == 2

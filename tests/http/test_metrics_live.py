"""The dashboard's AMQP counters and the commit round histograms of a real server, moved by
real pika clients: each family counts what RabbitMQ's does."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
from typing import Any

import pika
import pytest

from tests.conftest import ServerProcess


def _value(text: str, series: str) -> float:
    m = re.search("^" + re.escape(series) + r" (\S+)$", text, re.M)
    assert m, f"no {series}"
    return float(m.group(1))


def test_channel_queue_and_get_counters_and_commit_histograms(http_server: ServerProcess,
                                                               client_for: Any) -> None:
    c = client_for(http_server)
    before = c.get("/metrics").body.decode()
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1",
                                                             http_server.amqp_port))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("work", durable=True)  # created
    ch.queue_declare("work", durable=True)  # declared again
    ch.queue_declare("work", passive=True)
    ch.queue_declare("scratch")
    for _ in range(3):
        ch.basic_publish("", "work", b"job", pika.BasicProperties(delivery_mode=2))
    ch.basic_get("scratch")  # empty
    method, _p, _b = ch.basic_get("work", auto_ack=True)
    assert method is not None
    method, _p, _b = ch.basic_get("work")
    assert method is not None
    ch.basic_ack(method.delivery_tag)
    got: list[bytes] = []

    def on_message(chan: Any, deliver: Any, _props: Any, body: bytes) -> None:
        got.append(body)
        chan.basic_ack(deliver.delivery_tag)
        chan.stop_consuming()

    ch.basic_consume("work", on_message)
    ch.start_consuming()
    ch.basic_publish("", "work", b"job", pika.BasicProperties(delivery_mode=2))
    ch2 = conn.channel()
    ch2.basic_consume("work", lambda c_, d, p, b: c_.stop_consuming(), auto_ack=True)
    ch2.start_consuming()
    ch2.queue_delete("scratch")
    ch2.close()
    text = c.get("/metrics").body.decode()
    for family, delta in (("rabbitmq_queues_declared_total", 4),
                          ("rabbitmq_queues_created_total", 2),
                          ("rabbitmq_queues_deleted_total", 1),
                          ("rabbitmq_channel_get_empty_total", 1),
                          ("rabbitmq_channel_get_total", 1),
                          ("rabbitmq_channel_get_ack_total", 1),
                          ("rabbitmq_channel_messages_delivered_ack_total", 1),
                          ("rabbitmq_channel_messages_delivered_total", 1),
                          ("rabbitmq_channels_opened_total", 2),
                          ("rabbitmq_channels_closed_total", 1)):
        assert _value(text, family) - _value(before, family) == delta, family
    assert _value(text, "rabbitmq_channel_messages_unconfirmed") == 0
    conn.close()
    after = c.get("/metrics").body.decode()
    assert _value(after, "rabbitmq_channels_closed_total") == \
        _value(after, "rabbitmq_channels_opened_total")  # with their connection
    rounds = _value(after, "oxiedge_store_commit_rounds_total")
    name = "oxiedge_store_commit_round_seconds"
    assert _value(after, f"{name}_count") == rounds > 0
    assert _value(after, f'{name}_bucket{{le="+Inf"}}') == rounds
    assert _value(after, "oxiedge_store_commit_batch_operations_count") == rounds
    assert _value(after, "oxiedge_store_commit_batch_operations_sum") == \
        _value(after, "oxiedge_store_committed_ops_total")
    if shutil.which("promtool") is None:
        pytest.skip("promtool (Debian: prometheus) not installed")
    res = subprocess.run(["promtool", "check", "metrics"], input=after, capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 0, res.stdout + res.stderr


def test_mqtt_messages_by_protocol_version(http_server: ServerProcess, client_for: Any) -> None:
    import paho.mqtt.client as paho

    assert http_server.mqtt_port
    clients = []
    for proto, name in ((paho.MQTTv311, "v3"), (paho.MQTTv5, "v5")):
        cl = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=name, protocol=proto)
        cl.connect("127.0.0.1", http_server.mqtt_port)
        cl.loop_start()
        clients.append(cl)
    v3, v5 = clients
    got: list[str] = []
    subscribed, all_in = threading.Event(), threading.Event()

    def on_message(_c: Any, _u: Any, m: Any) -> None:
        got.append(m.topic)
        if len(got) == 3:
            all_in.set()

    v5.on_message = on_message
    v5.on_subscribe = lambda *_a: subscribed.set()
    v5.subscribe("m/#", qos=1)
    assert subscribed.wait(10)
    c = client_for(http_server)
    text = c.get("/metrics").body.decode()
    base = {k: _value(text, f'rabbitmq_global_messages_{k}') for k in (
        'received_total{protocol="mqtt311"}', 'received_total{protocol="mqtt50"}',
        'delivered_total{protocol="mqtt311"}', 'delivered_total{protocol="mqtt50"}')}
    v3.publish("m/a", b"1", qos=1).wait_for_publish(10)
    v3.publish("m/b", b"2", qos=1).wait_for_publish(10)
    v5.publish("m/c", b"3", qos=1).wait_for_publish(10)
    assert all_in.wait(10)
    assert sorted(got) == ["m/a", "m/b", "m/c"]
    text = c.get("/metrics").body.decode()
    delta = {k: _value(text, f"rabbitmq_global_messages_{k}") - v for k, v in base.items()}
    assert delta == {'received_total{protocol="mqtt311"}': 2,
                     'received_total{protocol="mqtt50"}': 1,
                     'delivered_total{protocol="mqtt311"}': 0,
                     'delivered_total{protocol="mqtt50"}': 3}
    for cl in clients:
        cl.loop_stop()
        cl.disconnect()

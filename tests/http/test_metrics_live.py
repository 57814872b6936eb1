"""The dashboard's AMQP counters and the commit round histograms of a real server, moved by
real pika clients: each family counts what RabbitMQ's does."""

from __future__ import annotations

import re
import shutil
import subprocess
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

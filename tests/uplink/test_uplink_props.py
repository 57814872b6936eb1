"""MQTT 5 properties through the uplink against real upstreams: a Mosquitto upstream gets
MQTT 5 with the properties (also from the outbox after a SIGKILL, and commands come back
with theirs); an AMQP upstream (a second oxiedge) gets RabbitMQ's mapping."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pika

from oxiedge.staged import MessageProps
from oxiedge.uplink.msgprops import decode_props, encode_props, publish_block
from oxiedge.uplink.outbox import decode_record, encode_record, record_props
from tests.bridge.conftest import amqp
from tests.mqtt.paho5 import Client5, props

from .test_uplink_e2e import connected, drained, not_connected, unique, wait_status

P = MessageProps(1, 1_800_000_060.0, "application/json", "rep/dev", b"\x00c",
                 (("u", "1"), ("u", "2")))


def test_outbox_record_keeps_properties() -> None:
    value = encode_record("sensors/t", b"21", 1234, False, P)
    assert decode_record(value) == (1234, False, "sensors/t", b"21")
    assert record_props(value) == P
    assert record_props(encode_record("sensors/t", b"21", 1234)) is None
    assert decode_props(encode_props(P), 0)[0] == P
    block = publish_block(P, 1_800_000_000.5)
    assert block is not None and b"\x02\x00\x00\x00\x3c" in block  # 60 s left
    assert publish_block(P, 1_800_000_061.0) is None  # expired: not sent
    assert publish_block(None, 0.0) == b"\x00"


def _mqtt_props() -> Any:
    return props(ContentType="application/json", ResponseTopic="rep/dev",
                 CorrelationData=b"\x00c", MessageExpiryInterval=3600,
                 UserProperty=[("u", "1"), ("u", "2")])


def _assert_props(m: Any) -> None:
    got = m.properties
    assert (got.ContentType, got.ResponseTopic, got.CorrelationData) == \
        ("application/json", "rep/dev", b"\x00c")
    assert got.UserProperty == [("u", "1"), ("u", "2")]
    assert 3000 < got.MessageExpiryInterval <= 3600


def test_mosquitto_upstream_gets_mqtt5_properties_through_sigkill(
        tmp_path: Path, start_server: Any) -> None:  # fmt: skip
    from .mosquitto import Mosquitto

    mq = Mosquitto.start(tmp_path / "mosquitto")
    dev = unique("p")
    try:
        sink = Client5(mq.port, f"sink-{dev}")
        sink.connect(properties=props(1, SessionExpiryInterval=3600))
        assert sink.subscribe("up/#", 1) == [1]
        srv = start_server("--device-id", dev, data=tmp_path / "data")
        srv.cli("uplink", "add", "up5", mq.url(), "--out", "sensors/#", "--in", "cmd/#",
                "--prefix", "up/")
        wait_status(srv, "up5", connected, "connected")
        assert srv.wait_for_line("uplink up5 connected to").count("MQTT 5")
        local = Client5(srv.mqtt_port, "local-pub")
        local.connect()
        assert local.subscribe("cmd/#", 1) == [1]
        assert local.publish("sensors/a", b"1", 1, properties=_mqtt_props()) == 0
        m = sink.get()
        assert (m.topic, m.payload) == ("up/sensors/a", b"1")
        _assert_props(m)
        # A command with properties comes back down with them.
        sink.publish("up/cmd/go", b"go", 1, properties=_mqtt_props())
        m = local.get()
        assert (m.topic, m.payload) == ("cmd/go", b"go")
        _assert_props(m)
        wait_status(srv, "up5", drained, "drained")
        # In the outbox across a SIGKILL: byte for byte once the upstream is back.
        sink.close()
        mq.stop()
        wait_status(srv, "up5", not_connected, "disconnected")
        assert local.publish("sensors/b", b"2", 1, properties=_mqtt_props()) == 0
        local.close()
        srv.kill()
        mq.start_again()
        sink = Client5(mq.port, f"sink2-{dev}")
        sink.connect()
        assert sink.subscribe("up/#", 1) == [1]
        srv.start()
        m = sink.get(timeout=30)
        assert (m.topic, m.payload) == ("up/sensors/b", b"2")
        _assert_props(m)
        sink.close()
    finally:
        mq.stop()


def test_amqp_upstream_gets_the_amq_topic_mapping(tmp_path: Path, start_server: Any) -> None:
    central = start_server(data=tmp_path / "central")
    with amqp(central.amqp_port) as conn:
        ch = conn.channel()
        ch.queue_declare("central", durable=True)
        ch.queue_bind("central", "amq.topic", "sensors.#")
    dev = unique("a")
    srv = start_server("--device-id", dev, data=tmp_path / "edge")
    srv.cli("uplink", "add", "upa", f"amqp://guest:guest@127.0.0.1:{central.amqp_port}/",
            "--out", "sensors/#", "--in", "cmd/#")
    wait_status(srv, "upa", connected, "connected")
    local = Client5(srv.mqtt_port, "local-a")
    local.connect()
    assert local.subscribe("cmd/#", 1) == [1]
    assert local.publish("sensors/a", b"1", 1, properties=_mqtt_props()) == 0
    # A command from the AMQP upstream comes down with its properties mapped back.
    with amqp(central.amqp_port) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("amq.topic", "cmd.go", b"go", pika.BasicProperties(
            delivery_mode=2, content_type="text/plain", correlation_id="c-7",
            headers={"x-reply-to-topic": "rep.dev", "u": "1"}))
    m = local.get()
    assert (m.topic, m.payload) == ("cmd/go", b"go")
    assert (m.properties.ContentType, m.properties.CorrelationData,
            m.properties.ResponseTopic) == ("text/plain", b"c-7", "rep/dev")
    assert m.properties.UserProperty == [("u", "1")]
    local.close()
    wait_status(srv, "upa", drained, "drained")
    with amqp(central.amqp_port) as conn:
        method, bp, body = conn.channel().basic_get("central", auto_ack=True)
    assert method is not None and (method.routing_key, body) == ("sensors.a", b"1")
    assert (bp.content_type, bp.delivery_mode) == ("application/json", 2)
    assert bp.correlation_id is None  # (b"\x00c" is no short string: a header)
    assert bp.headers["x-correlation-id"] == "\x00c"  # (pika: a long string is str)
    assert bp.headers["x-reply-to-topic"] == "rep.dev" and bp.headers["u"] == "1"
    assert bp.headers["x-oxiedge-topic"] == "sensors/a"
    assert 3000_000 < int(bp.expiration) <= 3600_000

"""MQTT 5 with paho-mqtt (``protocol=MQTTv5``) against a real ``oxiedge serve``."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import pytest
from paho.mqtt.packettypes import PacketTypes

from oxiedge.mqtt.codec5 import decode_all5
from oxiedge.mqtt.encode5 import encode5
from oxiedge.mqtt.packets5 import Connect5, Disconnect5, Publish5, Will5
from oxiedge.mqtt.properties import Properties
from tests.conftest import ServerProcess as Server

from .conftest import Client
from .paho5 import Make5 as Make
from .paho5 import props


def test_connack_announces_what_the_broker_does(shared_mqtt: Server, v5: Make) -> None:
    c = v5(shared_mqtt.mqtt_port, "")
    present, p = c.connect()
    assert present is False and p is not None
    assert p.AssignedClientIdentifier.startswith("oxiedge-")  # MQTT-3.2.2-16
    assert p.ReceiveMaximum >= 1 and p.TopicAliasMaximum >= 1
    assert p.MaximumPacketSize > 0
    assert p.SharedSubscriptionAvailable == 1
    for absent in ("RetainAvailable", "MaximumQoS", "WildcardSubscriptionAvailable",
                   "SubscriptionIdentifierAvailable"):
        assert not hasattr(p, absent)  # absent means available


def test_properties_arrive_byte_exact_at_every_qos(shared_mqtt: Server, v5: Make) -> None:
    port = shared_mqtt.mqtt_port
    sub = v5(port, "p-sub")
    sub.connect()
    assert sub.subscribe("p5/#", 2) == [2]
    pub = v5(port, "p-pub")
    pub.connect()
    sent = props(ContentType="text/plain; charset=utf-8", ResponseTopic="p5/reply",
                 CorrelationData=b"\x00\xffid", PayloadFormatIndicator=1,
                 UserProperty=[("k", "1"), ("k", "2"), ("a", "")])  # fmt: skip
    for qos in (0, 1, 2):
        assert pub.publish(f"p5/{qos}", f"payload {qos}".encode(), qos, properties=sent) == 0
        m = sub.get()
        assert (m.topic, m.payload, m.qos) == (f"p5/{qos}", f"payload {qos}".encode(), qos)
        got = m.properties
        assert got.ContentType == "text/plain; charset=utf-8"
        assert got.ResponseTopic == "p5/reply" and got.CorrelationData == b"\x00\xffid"
        assert got.PayloadFormatIndicator == 1
        assert got.UserProperty == [("k", "1"), ("k", "2"), ("a", "")]  # order, duplicates


def test_between_mqtt5_and_311(shared_mqtt: Server, v5: Make,
                               clients: Callable[..., Client]) -> None:  # fmt: skip
    port = shared_mqtt.mqtt_port
    old = clients(port, "x-311")
    old.connect()
    assert old.subscribe(("x5/#", 1)) == [1]
    new = v5(port, "x-5")
    new.connect()
    assert new.subscribe("x5/#", 1) == [1]
    new.publish("x5/a", b"from 5", 1, properties=props(ContentType="c", UserProperty=[("u", "v")]))
    m = old.get()  # a 3.1.1 subscriber gets no properties
    assert (m.topic, m.payload, m.qos) == ("x5/a", b"from 5", 1)
    assert new.get().properties.ContentType == "c"
    old.publish("x5/b", b"from 3.1.1", qos=0)
    m5 = new.get()
    assert (m5.topic, m5.payload) == ("x5/b", b"from 3.1.1")
    assert old.get().payload == b"from 3.1.1"


def test_message_expiry_is_reduced_and_expired_ones_never_arrive(shared_mqtt: Server,
                                                                 v5: Make) -> None:
    port = shared_mqtt.mqtt_port
    sub = v5(port, "e-sub")
    sub.connect(clean_start=True, properties=props(PacketTypes.CONNECT, SessionExpiryInterval=300))
    assert sub.subscribe("e5/#", 1) == [1]
    sub.disconnect()
    pub = v5(port, "e-pub")
    pub.connect()
    assert pub.publish("e5/short", b"gone", 1, properties=props(MessageExpiryInterval=1)) == 0
    assert pub.publish("e5/long", b"kept", 1, properties=props(MessageExpiryInterval=100)) == 0
    time.sleep(2.2)  # (the short one's whole lifetime, on the broker's wall clock)
    again = v5(port, "e-sub")
    present, _ = again.connect(clean_start=False,
                               properties=props(PacketTypes.CONNECT, SessionExpiryInterval=300))
    assert present is True
    m = again.get()
    assert (m.topic, m.payload) == ("e5/long", b"kept")
    assert 90 <= m.properties.MessageExpiryInterval < 100  # MQTT-3.3.2-6
    assert again.nothing()


def test_session_expiry_zero_ends_the_session(shared_mqtt: Server, v5: Make) -> None:
    port = shared_mqtt.mqtt_port
    c = v5(port, "z-sess")
    c.connect(clean_start=False)  # no Session Expiry Interval: 0
    c.subscribe("z5/#", 1)
    c.disconnect()
    again = v5(port, "z-sess")
    present, _ = again.connect(clean_start=False,
                               properties=props(PacketTypes.CONNECT, SessionExpiryInterval=60))
    assert present is False
    again.disconnect()
    third = v5(port, "z-sess")
    present, _ = third.connect(clean_start=False)
    assert present is True  # kept: it had an interval of 60
    fourth = v5(port, "z-sess")  # Clean Start discards it
    assert fourth.connect(clean_start=True)[0] is False


def test_topic_alias_from_the_client(shared_mqtt: Server, v5: Make) -> None:
    port = shared_mqtt.mqtt_port
    sub = v5(port, "a-sub")
    sub.connect()
    sub.subscribe("a5/#", 1)
    pub = v5(port, "a-pub")
    pub.connect()
    pub.publish("a5/long/topic", b"one", 1, properties=props(TopicAlias=3))
    pub.publish("", b"two", 1, properties=props(TopicAlias=3))
    got = [sub.get(), sub.get()]
    assert [(m.topic, m.payload) for m in got] == [("a5/long/topic", b"one"),
                                                   ("a5/long/topic", b"two")]  # fmt: skip
    assert all(not hasattr(m.properties, "TopicAlias") for m in got)  # never forwarded


def test_reason_codes_of_acks_and_unsuback(shared_mqtt: Server, v5: Make) -> None:
    c = v5(shared_mqtt.mqtt_port, "r-codes")
    c.connect()
    bad = props(PayloadFormatIndicator=1)
    assert c.publish("r5/x", b"\xff\xfe", 1, properties=bad) == 0x99
    # (paho sends PUBREL after a refusing PUBREC anyway; that id is unknown: PUBCOMP 0x92)
    assert c.publish("r5/x", b"\xff\xfe", 2, properties=bad) in (0x99, 0x92)
    # Accepted, but nobody subscribed: 0x10 (No matching subscribers) at QoS 1 and 2.
    assert c.publish("r5/x", "fine ü".encode(), 1, properties=bad) == 0x10
    assert c.publish("r5/x", b"plain", 1) == 0x10
    assert c.subscribe("r5/a", 1) == [1]
    assert c.publish("r5/a", b"taken", 1) == 0
    assert c.get().payload == b"taken"
    assert c.subscribe("$share//r5/a", 1) == [0x8F]
    assert c.unsubscribe("r5/a", "r5/never") == [0x00, 0x11]


def test_retain_handling(shared_mqtt: Server, v5: Make) -> None:
    port = shared_mqtt.mqtt_port
    pub = v5(port, "rh-pub")
    pub.connect()
    pub.publish("rh5/t", b"kept", 1, retain=True, properties=props(ContentType="r"))
    c = v5(port, "rh-sub")
    c.connect()
    c.subscribe("rh5/#", 1, retainHandling=2)
    assert c.nothing()
    c.subscribe("rh5/#", 1, retainHandling=1)  # not new: nothing
    assert c.nothing()
    c.subscribe("rh5/+", 1, retainHandling=1)  # new
    m = c.get()
    assert (m.payload, m.retain, m.properties.ContentType) == (b"kept", True, "r")
    c.subscribe("rh5/#", 1, retainHandling=0)
    assert c.get().payload == b"kept"
    pub.publish("rh5/t", b"", 1, retain=True)


def test_will_on_disconnect_with_will_message(shared_mqtt: Server, v5: Make) -> None:
    port = shared_mqtt.mqtt_port
    watcher = v5(port, "w-watch")
    watcher.connect()
    watcher.subscribe("w5/#", 1)
    quiet = v5(port, "w-quiet")
    quiet.connect(will=("w5/quiet", b"no", 1, False, None))
    quiet.disconnect(0)
    loud = v5(port, "w-loud")
    loud.connect(will=("w5/loud", b"yes", 1, False, props(ContentType="will")))
    loud.disconnect(0x04)
    m = watcher.get()
    assert (m.topic, m.payload, m.properties.ContentType) == ("w5/loud", b"yes", "will")
    assert watcher.nothing()


def test_take_over_tells_the_old_connection(shared_mqtt: Server, v5: Make) -> None:
    first = v5(shared_mqtt.mqtt_port, "t-over")
    first.connect()
    second = v5(shared_mqtt.mqtt_port, "t-over")
    second.connect()
    rc, _p = first.disconnects.get(timeout=10)
    assert rc == 0x8E


def test_maximum_packet_size_of_the_client(shared_mqtt: Server, v5: Make) -> None:
    port = shared_mqtt.mqtt_port
    small = v5(port, "m-small")
    small.connect(properties=props(PacketTypes.CONNECT, MaximumPacketSize=64))
    small.subscribe("m5/#", 1)
    pub = v5(port, "m-pub")
    pub.connect()
    pub.publish("m5/big", b"x" * 100, 1)
    pub.publish("m5/small", b"y", 1)
    m = small.get()
    assert (m.topic, m.payload) == ("m5/small", b"y")  # the big one was never sent
    assert small.nothing()


# ------------------------------------------------------------- raw protocol errors
def _raw5(port: int | None, client_id: str) -> socket.socket:
    assert port is not None
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(encode5(Connect5(client_id)))
    assert s.recv(64)[:1] == b"\x20"
    return s


def _read_all(s: socket.socket) -> bytes:
    data = b""
    while chunk := s.recv(4096):
        data += chunk
    return data


@pytest.mark.parametrize(("packet", "reason"), [
    (Publish5("t", b"x", properties=Properties(topic_alias=0)), 0x94),
    (Publish5("", b"x", properties=Properties(topic_alias=5)), 0x82),
    (Publish5("t", b"\xff", properties=Properties(payload_format_indicator=1)), 0x99),
    (Connect5("again"), 0x82),
])  # fmt: skip
def test_protocol_errors_get_a_disconnect_with_the_reason(shared_mqtt: Server, packet: object,
                                                          reason: int) -> None:
    s = _raw5(shared_mqtt.mqtt_port, f"raw-{reason}")
    s.sendall(encode5(packet))  # type: ignore[arg-type]
    assert decode_all5(_read_all(s)) == [Disconnect5(reason)]
    s.close()


def test_no_local_and_retain_as_published(shared_mqtt: Server, v5: Make) -> None:
    port = shared_mqtt.mqtt_port
    me = v5(port, "nl-me")
    me.connect()
    assert me.subscribe("nl5/#", 1, noLocal=True) == [1]
    other = v5(port, "nl-other")
    other.connect()
    assert other.subscribe("nl5/#", 1, retainAsPublished=True) == [1]
    me.publish("nl5/a", b"mine", 1)
    assert other.get().payload == b"mine"
    assert me.nothing()  # MQTT-3.8.3-3: not to the publisher
    other.publish("nl5/b", b"theirs", 1, retain=True)
    assert me.get().retain is False  # MQTT-3.3.1-9: live deliveries without RETAIN
    assert other.get().retain is True  # Retain As Published (3.8.3.1)
    other.publish("nl5/b", b"", 1, retain=True)
    me.get()


def _with_will(port: int | None, client_id: str, topic: str, delay: int) -> socket.socket:
    """A raw MQTT 5 connection with a will delayed by ``delay`` seconds (paho's own
    client would reconnect on its own and so cancel the will)."""
    assert port is not None
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    will = Will5(topic, topic.encode(), 1, False, Properties(will_delay_interval=delay))
    s.sendall(encode5(Connect5(client_id, True, 60, will=will,
                               properties=Properties(session_expiry_interval=60))))
    assert s.recv(64)[:1] == b"\x20"
    return s


def test_will_delay_interval(shared_mqtt: Server, v5: Make) -> None:
    port = shared_mqtt.mqtt_port
    watcher = v5(port, "wd-watch")
    watcher.connect()
    watcher.subscribe("wd5/#", 1)
    _with_will(port, "wd-late", "wd5/late", 2).close()  # no DISCONNECT
    started = time.monotonic()
    m = watcher.get(timeout=10)
    assert m.payload == b"wd5/late" and time.monotonic() - started >= 1.5
    _with_will(port, "wd-back", "wd5/back", 3).close()
    again = v5(port, "wd-back")  # a reconnect within the delay: no will (MQTT-3.1.3-9)
    again.connect(clean_start=False, properties=props(PacketTypes.CONNECT,
                                                      SessionExpiryInterval=60))
    assert watcher.nothing(4.0)


def test_subscription_identifiers(shared_mqtt: Server, v5: Make) -> None:
    port = shared_mqtt.mqtt_port
    pub = v5(port, "si-pub")
    pub.connect()
    pub.publish("si5/kept", b"r", 1, retain=True)
    c = v5(port, "si-sub")
    c.connect()
    assert c.subscribe("si5/#", 1, sid=7) == [1]
    m = c.get()  # the retained message carries the identifier of its subscription
    assert (m.payload, m.properties.SubscriptionIdentifier) == (b"r", [7])
    assert c.subscribe("si5/+", 1, sid=300000) == [1]
    c.get()
    c.subscribe("+/plain", 1)
    pub.publish("si5/x", b"both", 1)
    m = c.get()
    assert sorted(m.properties.SubscriptionIdentifier) == [7, 300000]  # MQTT-3.3.4-4
    assert c.nothing()  # one copy
    pub.publish("si5/plain", b"three", 1)
    assert sorted(c.get().properties.SubscriptionIdentifier) == [7, 300000]
    pub.publish("si5/kept", b"", 1, retain=True)


def test_shutdown_tells_mqtt5_clients(mqtt_server: Server, v5: Make) -> None:
    c = v5(mqtt_server.mqtt_port, "bye")
    c.connect()
    mqtt_server.stop()  # SIGTERM
    rc, _p = c.disconnects.get(timeout=10)
    assert rc == 0x8B  # Server shutting down

"""An MQTT 5 connection's own terms against a real ``oxiedge serve``: Server Keep Alive
under ``--mqtt-max-keepalive``, Topic Aliases from the broker to a client (per connection,
never beyond the client's maximum), enhanced authentication refused with 0x8C."""

from __future__ import annotations

import time
from collections.abc import Callable

from oxiedge.mqtt.packets5 import (
    Connack5,
    Connect5,
    Disconnect5,
    Puback5,
    Publish5,
    Pubrel5,
    Suback5,
    Subscribe5,
    Subscription,
    Unsuback5,
    Unsubscribe5,
)
from oxiedge.mqtt.properties import Properties
from tests.conftest import ServerProcess

from .test_mqtt5_durability import Raw5

Start = Callable[..., ServerProcess]
NONE = Properties()
ALIASES = Properties(topic_alias_maximum=2, session_expiry_interval=60)


def connack(port: int | None, keep_alive: int, props: Properties = NONE) -> Connack5:
    c = Raw5(port)
    c.send(Connect5("ka", True, keep_alive, properties=props))
    ack = c.next()
    c.close()
    assert isinstance(ack, Connack5)
    return ack


def test_server_keep_alive_lowers_a_longer_one(start_mqtt: Start) -> None:
    srv = start_mqtt("--mqtt-max-keepalive", "60")
    port = srv.mqtt_port
    assert connack(port, 120).properties.server_keep_alive == 60  # MQTT-3.2.2-21
    assert connack(port, 0).properties.server_keep_alive == 60  # 0 (none) is longer still
    assert connack(port, 30).properties.server_keep_alive is None  # kept as asked


def test_the_keep_alive_granted_is_the_one_enforced(start_mqtt: Start) -> None:
    srv = start_mqtt("--mqtt-max-keepalive", "1")  # 1.5 x 1 s without a packet ends it
    c = Raw5(srv.mqtt_port)
    c.send(Connect5("ka-short", True, 600))
    ack = c.next()
    assert isinstance(ack, Connack5) and ack.properties.server_keep_alive == 1
    assert c.next().reason_code == 0x8D  # type: ignore[attr-defined]


def test_default_has_no_bound(shared_mqtt: ServerProcess) -> None:
    assert connack(shared_mqtt.mqtt_port, 0).properties.server_keep_alive is None
    assert connack(shared_mqtt.mqtt_port, 65535).properties.server_keep_alive is None


def test_topic_aliases_to_the_client(shared_mqtt: ServerProcess) -> None:
    port = shared_mqtt.mqtt_port
    sub = Raw5(port)
    sub.connect("al-sub", props=ALIASES)
    sub.send(Subscribe5(1, (Subscription("al/#", 1),)))
    assert sub.next() == Suback5(1, (1,))
    pub = Raw5(port)
    pub.connect("al-pub", props=Properties())
    seen = []
    for i, topic in enumerate(["al/a", "al/a", "al/b", "al/c", "al/b", "al/a"]):
        pub.publish(topic, f"{i}".encode(), 1, i + 1, Properties(content_type="t"))
        p = sub.next()
        assert isinstance(p, Publish5) and p.packet_id is not None
        sub.send(Puback5(p.packet_id))
        seen.append((p.topic, p.properties.topic_alias, p.properties.content_type))
    assert seen == [("al/a", 1, "t"), ("", 1, "t"), ("al/b", 2, "t"),
                    ("al/c", None, "t"),  # both aliases taken: the name itself
                    ("", 2, "t"), ("", 1, "t")]  # fmt: skip
    sub.close()
    # A new connection starts without aliases (never persisted, MQTT-3.3.2-7).
    sub = Raw5(port)
    sub.connect("al-sub", clean_start=False, props=ALIASES)
    pub.send(Publish5("al/b", b"again", 0))
    p = sub.next()
    assert isinstance(p, Publish5) and (p.topic, p.properties.topic_alias) == ("al/b", 1)
    sub.close()
    pub.close()


def test_no_aliases_without_a_client_maximum(shared_mqtt: ServerProcess) -> None:
    port = shared_mqtt.mqtt_port
    sub = Raw5(port)
    sub.connect("na-sub", props=Properties())
    sub.send(Subscribe5(1, (Subscription("na/#", 0),)))
    assert sub.next() == Suback5(1, (0,))
    pub = Raw5(port)
    pub.connect("na-pub", props=Properties())
    for _ in range(2):
        pub.send(Publish5("na/x", b"x", 0))
        p = sub.next()
        assert isinstance(p, Publish5) and (p.topic, p.properties.topic_alias) == ("na/x", None)
    sub.close()
    pub.close()


def test_an_authentication_method_gets_0x8c(shared_mqtt: ServerProcess) -> None:
    ack = connack(shared_mqtt.mqtt_port, 60, Properties(authentication_method="SCRAM-SHA-1",
                                                        authentication_data=b"n,,n=u,r=x"))
    assert ack.reason_code == 0x8C  # Bad authentication method (4.12)


def test_0x10_only_when_nothing_took_the_message(start_server: Start) -> None:
    import pika

    srv = start_server("--ingest", "ing/#:docs")
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", srv.amqp_port))
    ch = conn.channel()
    ch.queue_declare("q10", durable=False, exclusive=True)
    ch.queue_bind("q10", "amq.topic", "amqp.#")
    pub = Raw5(srv.mqtt_port)
    pub.connect("z-pub", props=Properties())
    codes = []
    for pid, topic in enumerate(["none/x", "amqp/x", "ing/x"], start=1):
        for qos in (1, 2):
            pub.send(Publish5(topic, b"{}", qos, False, False, pid * 2 + qos))
            ack = pub.next()
            codes.append((topic, qos, ack.reason_code))  # type: ignore[attr-defined]
            if qos == 2:
                pub.send(Pubrel5(pid * 2 + qos))
                pub.next()
    # An AMQP queue that is not durable took it (no commit needed): not 0x10 either.
    assert codes == [("none/x", 1, 0x10), ("none/x", 2, 0x10), ("amqp/x", 1, 0),
                     ("amqp/x", 2, 0), ("ing/x", 1, 0), ("ing/x", 2, 0)]  # fmt: skip
    assert ch.basic_get("q10", auto_ack=True)[2] == b"{}"
    # A queue whose bound refuses under reject-publish: 0x97 (Quota exceeded).
    ch.queue_declare("qfull", durable=False, exclusive=True,
                     arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    ch.queue_bind("qfull", "amq.topic", "full.#")
    for pid, want in ((20, 0), (21, 0x97)):
        pub.send(Publish5("full/x", b"f", 1, False, False, pid))
        assert pub.next() == Puback5(pid, want)
    # The full queue refuses while an ingest route takes it too: still 0x97 (as AMQP's
    # nack when one of the queues refuses).
    ch.queue_bind("qfull", "amq.topic", "ing.#")
    pub.send(Publish5("ing/y", b"{}", 1, False, False, 22))
    assert pub.next() == Puback5(22, 0x97)
    conn.close()
    pub.close()


def test_an_administrators_kick_says_0x98(start_mqtt: Start) -> None:
    srv = start_mqtt()
    c = Raw5(srv.mqtt_port)
    c.connect("kicked", props=Properties())
    assert "client 'kicked' disconnected" in srv.cli("client", "kick", "kicked").stdout
    assert c.next() == Disconnect5(0x98)  # Administrative action
    c.close()


def test_unsuback_says_which_filter_was_invalid(shared_mqtt: ServerProcess) -> None:
    c = Raw5(shared_mqtt.mqtt_port)
    c.connect("unsub-codes", props=Properties())
    c.send(Subscribe5(1, (Subscription("u/a", 1),)))
    assert c.next() == Suback5(1, (1,))
    c.send(Unsubscribe5(2, ("u/a", "u/never", "#/u", "$share//u")))
    assert c.next() == Unsuback5(2, (0x00, 0x11, 0x8F, 0x8F))
    c.sock.sendall(b"\xa2\x05\x00\x03\x00\x00\x00")  # an empty filter (MQTT-4.7.3-1)
    assert c.next() == Disconnect5(0x81)
    c.close()


def test_a_subscribe_sent_before_anothers_publish_is_applied_first(
        shared_mqtt: ServerProcess) -> None:
    # paho's test_subscribe_options: A subscribes with No Local and waits for its SUBACK;
    # B (connected; its CONNECT needed an await, so its reader waits in trio while A's,
    # after a burst that needed none, waits in the hot loop) sends SUBSCRIBE, and A its
    # PUBLISH right after, without B's SUBACK in between. The broker handles the input in
    # the order it arrived (net/hot.py): B gets the message, A does not.
    for round_ in range(5):
        a, b = Raw5(shared_mqtt.mqtt_port), Raw5(shared_mqtt.mqtt_port)
        a.connect(f"order-a{round_}", props=NONE)
        b.connect(f"order-b{round_}", props=NONE)
        a.send(Subscribe5(1, (Subscription("order/t", 2, no_local=True),)))
        assert a.next() == Suback5(1, (2,))
        # A's connection goes idle first, as in paho's test (its wait polls every 0.5 s):
        # a reader still busy with A's last burst reads what A sends next at once.
        time.sleep(0.2)
        b.send(Subscribe5(1, (Subscription("order/t", 2, no_local=True),)))
        a.send(Publish5("order/t", b"noLocal", 1, False, False, 3))
        assert a.next() == Puback5(3)  # (matching subscribers: B's, and A's own)
        assert b.next() == Suback5(1, (2,))
        got = b.next()
        assert isinstance(got, Publish5) and got.payload == b"noLocal", got
        a.send(Disconnect5(0))
        b.send(Disconnect5(0))
        a.close()
        b.close()

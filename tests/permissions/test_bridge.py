"""The MQTT ⇄ AMQP bridge is no way around a rule: MQTT ACLs hold on amq.topic, amq.topic's
topic permissions hold over MQTT."""

from __future__ import annotations

from collections.abc import Callable

from tests.conftest import ServerProcess
from tests.permissions.conftest import Client, allowed, amqp, refused, rules

Serve = Callable[..., ServerProcess]

RULES = rules({
    # MQTT-restricted, no AMQP permissions
    "m": {"acl": [["readwrite", "sensors/#"], ["deny", "sensors/secret"]]},
    # AMQP topic permissions on amq.topic, no MQTT lines
    "a": {"topics": {"/": {"amq.topic": {"write": r"^jobs\.", "read": r"^jobs\."}}}},
})


def test_an_mqtt_rule_holds_for_the_same_user_over_amqp(serve_with: Serve) -> None:
    server = serve_with(["m", "a", "admin"], RULES)
    watcher = Client(server.mqtt_port, "admin", "watcher")
    try:
        assert watcher.subscribe("#") == [1]
        with amqp(server.amqp_port, "m") as m:
            q = allowed(m, lambda ch: ch.queue_declare("", exclusive=False)).method.queue
            # publish: the MQTT write rule applies to the topic the routing key becomes
            allowed(m, lambda ch: ch.basic_publish("amq.topic", "sensors.t1", b"ok"))
            refused(m, lambda ch: ch.basic_publish("amq.topic", "cmd.valve", b"no"))
            refused(m, lambda ch: ch.basic_publish("amq.topic", "sensors.secret", b"no"))
            # bind: an MQTT read rule must cover the filter the binding key becomes
            allowed(m, lambda ch: ch.queue_bind(q, "amq.topic", "sensors.*"))
            refused(m, lambda ch: ch.queue_bind(q, "amq.topic", "#"))
            refused(m, lambda ch: ch.queue_bind(q, "amq.topic", "sensors.secret"))
            refused(m, lambda ch: ch.queue_bind(q, "amq.topic", "sensors.#.x"))  # no MQTT form
            # other exchanges are not MQTT topics: the MQTT rules do not apply there
            allowed(m, lambda ch: ch.basic_publish("amq.direct", "cmd.valve", b"fine"))
        assert watcher.topics() == [("sensors/t1", b"ok", False)]
        # and over MQTT, of course
        m_mqtt = Client(server.mqtt_port, "m", "m1")
        try:
            assert m_mqtt.subscribe("sensors/+", "cmd/#") == [1, 0x80]
        finally:
            m_mqtt.close()
    finally:
        watcher.close()


def test_amq_topic_permissions_hold_for_the_same_user_over_mqtt(serve_with: Serve) -> None:
    server = serve_with(["m", "a", "admin"], RULES)
    with amqp(server.amqp_port, "admin") as admin:
        ch = admin.channel()
        ch.queue_declare("all")
        ch.queue_bind("all", "amq.topic", "#")
        a = Client(server.mqtt_port, "a", "a1")
        try:
            # SUBSCRIBE: the binding key the filter becomes must pass the read regexp
            assert a.subscribe("jobs/#", "#", "sensors/+") == [1, 0x80, 0x80]
            a.publish("jobs/j1", b"job", 1)
            a.publish("sensors/t1", b"forged", 1)  # write regexp refuses sensors.t1: dropped
            assert a.topics() == [("jobs/j1", b"job", False)]
        finally:
            a.close()
        got = [ch.basic_get("all", auto_ack=True) for _ in range(2)]
        assert [(g[0].routing_key, g[2]) for g in got if g[0] is not None] == [
            ("jobs.j1", b"job")]


def test_amqp_publishes_reach_only_mqtt_readers_allowed(serve_with: Serve) -> None:
    server = serve_with(["m", "admin"], RULES)
    m = Client(server.mqtt_port, "m", "m2")
    try:
        assert m.subscribe("sensors/#") == [1]
        with amqp(server.amqp_port, "admin") as admin:
            ch = admin.channel()
            for key in ("sensors.secret", "sensors.t2", "cmd.x"):
                ch.basic_publish("amq.topic", key, key.encode())
        # the deny line filters a delivery the wildcard subscription would match
        assert m.topics() == [("sensors/t2", b"sensors.t2", False)]
    finally:
        m.close()

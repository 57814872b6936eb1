"""MQTT 5 properties ⇄ AMQP 0-9-1 basic properties across ``amq.topic`` (``bridge/props.py``):
the mapping as byte vectors, then end to end with paho (MQTT 5) and pika against a real
server, through a SIGKILL both ways."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import pika

from oxiedge.amqp import spec
from oxiedge.amqp.fields import Raw, Timestamp
from oxiedge.bridge.props import (
    USER_HEADER_BUDGET,
    from_amqp,
    to_amqp,
    to_amqp_counted,
    valid_shortstr,
)
from oxiedge.mqtt.forward5 import from_bus
from oxiedge.mqtt.message import Message5
from oxiedge.staged import MessageProps
from oxiedge.uplink.msgprops import publish_block
from tests.bridge.conftest import amqp, consume, find, status
from tests.conftest import ServerProcess
from tests.mqtt.paho5 import Client5, props

Start = Callable[..., ServerProcess]
NOW = 1_800_000_000.0


def test_mqtt_to_amqp_as_rabbitmq_converts() -> None:
    mp = MessageProps(1, NOW + 60, "application/json", "replies/dev1", b"req-1",
                      (("z", "1"), ("a", "2"), ("z", "3"), ("x-reply-to-topic", "no")))
    bp = to_amqp(mp, True, NOW + 0.25)
    assert bp == spec.BasicProperties(
        content_type="application/json",
        headers={"a": "2", "x-reply-to-topic": "replies.dev1", "z": "1"},  # sorted, first wins
        delivery_mode=2, correlation_id="req-1", expiration="60000")
    assert bp.encode() == (b"\xb5\x00" + b"\x10application/json"
                           + b"\x00\x00\x00\x32" + b"\x01aS\x00\x00\x00\x012"
                           + b"\x10x-reply-to-topicS\x00\x00\x00\x0creplies.dev1"
                           + b"\x01zS\x00\x00\x00\x011"
                           + b"\x02" + b"\x05req-1" + b"\x0560000")
    # Correlation Data that is not a short string goes in x-correlation-id (a long string);
    # a non-ASCII or long Content Type and a name of 256 bytes are left out; QoS 0 is
    # delivery_mode 1; no expiry, no expiration.
    odd = MessageProps(None, None, "tëxt", None, b"\x00\xff", (("n" * 256, "v"),))
    bp = to_amqp(odd, False, NOW)
    assert bp == spec.BasicProperties(
        headers={"x-correlation-id": Raw(b"S\x00\x00\x00\x02\x00\xff")}, delivery_mode=1)
    assert to_amqp(MessageProps(content_type="t" * 256), False, NOW).content_type is None
    assert to_amqp(MessageProps(expires_at=NOW - 5), True, NOW).expiration == "0"
    assert valid_shortstr(b"abc") and not valid_shortstr(b"a\x00") \
        and not valid_shortstr(b"\xff") and not valid_shortstr(b"a" * 256)


def test_user_properties_fit_the_header_budget_in_order() -> None:
    # each entry costs name + 6 + value bytes: 30 of 106 fit in 3072, the rest are counted
    many = tuple((f"k{i:03d}", "v" * 96) for i in range(40))
    bp, dropped = to_amqp_counted(MessageProps(user_properties=(("small", "1"), *many)),
                                  True, NOW)
    assert bp.headers is not None and dropped == 12
    assert sorted(bp.headers) == ["k000", *(f"k{i:03d}" for i in range(1, 28)), "small"]
    assert sum(len(k) + 6 + len(str(v)) for k, v in bp.headers.items()) <= USER_HEADER_BUDGET
    # a later small one still fits after a big one is left out; the budget is not the
    # Correlation Data's or the Response Topic's (request/response needs them whole)
    big = MessageProps(response_topic="r" * 5000, correlation_data=b"\xff" * 5000,
                       user_properties=(("huge", "x" * 4000), ("ok", "1")))
    bp, dropped = to_amqp_counted(big, True, NOW)
    assert dropped == 1 and bp.headers is not None and bp.headers["ok"] == "1"
    assert len(str(bp.headers["x-reply-to-topic"])) == 5000 and "huge" not in bp.headers
    assert to_amqp(big, True, NOW) == bp


def test_amqp_to_mqtt_as_rabbitmq_converts() -> None:
    headers: dict[str, Any] = {
        "x-reply-to-topic": "replies.dev1", "s": "text", "i": 7, "neg": -3, "big": 1 << 40,
        "f": 1.5, "t": True, "no": False, "v": None, "ts": Timestamp(1700000000),
        "bin": b"\x01\x02", "arr": [1], "tbl": {"k": 1}, "nul": "a\x00b"}
    raw = spec.BasicProperties(content_type="text/plain", headers=headers, delivery_mode=2,
                               correlation_id="req-9", expiration="5000",
                               reply_to="ignored").encode()
    assert from_amqp(raw, NOW) == MessageProps(
        None, NOW + 5, "text/plain", "replies/dev1", b"req-9",
        (("s", "text"), ("i", "7"), ("neg", "-3"), ("big", "1099511627776"),
         ("f", "1.50000000000000000000e+00"), ("t", "true"), ("no", "false"), ("v", ""),
         ("ts", "1700000000")))
    # Without correlation_id, the x-correlation-id long string is the Correlation Data.
    raw = spec.BasicProperties(headers={"x-correlation-id": Raw(b"S\x00\x00\x00\x02\x00\xff"),
                                        "k": "v"}).encode()
    assert from_amqp(raw, NOW) == MessageProps(correlation_data=b"\x00\xff",
                                               user_properties=(("k", "v"),))
    # Nothing to carry: None (the common publish, delivery_mode alone, costs one test).
    assert from_amqp(spec.BasicProperties(delivery_mode=2).encode(), NOW) is None
    assert from_amqp(spec.BasicProperties(headers={"b": b"x"}).encode(), NOW) is None
    assert from_amqp(b"", NOW) is None


def test_amqp_expiration_that_mqtt_cannot_say() -> None:
    """Digits ``int`` refuses and numbers past MQTT's longest Message Expiry Interval: no
    exception, and a deadline an MQTT 5 subscriber's PUBLISH and a record can carry."""
    def mapped(expiration: str) -> MessageProps | None:
        return from_amqp(spec.BasicProperties(expiration=expiration,
                                              correlation_id="c").encode(), NOW)

    assert mapped("\u00b2") == MessageProps(correlation_data=b"c")  # no expiry
    longest = NOW + 0xFFFFFFFF
    for expiration in ("99999999999999", "9" * 255):
        mp = mapped(expiration)
        assert mp is not None and mp.expires_at == longest
        msg = Message5("t", b"", None, from_bus(mp), mp.expires_at)
        assert msg.remaining(NOW) == 0xFFFFFFFF
        assert msg.record(1, False)  # (its deadline fits the record's 8 bytes)
        assert publish_block(mp, NOW) is not None
    # A deadline 0xFFFFFFFF s off (an MQTT 5 publisher's longest) can round up past it
    now = 1_800_000_000.1
    assert math.ceil(now + 0xFFFFFFFF - now) > 0xFFFFFFFF
    assert Message5("t", b"", None, from_bus(MessageProps()), now + 0xFFFFFFFF
                    ).remaining(now) == 0xFFFFFFFF


def _bound_queue(port: int) -> None:
    with amqp(port) as conn:
        ch = conn.channel()
        ch.queue_declare("v5-worker", durable=True)
        ch.queue_bind("v5-worker", "amq.topic", "req.#")


def test_v5_publish_reaches_an_amqp_consumer_with_its_properties_after_sigkill(
        start_server: Start) -> None:  # fmt: skip
    server = start_server()
    _bound_queue(server.amqp_port)
    pub = Client5(server.mqtt_port, "v5-req")
    pub.connect()
    p = props(ContentType="application/json", ResponseTopic="rep/dev1",
              CorrelationData=b"c-1", MessageExpiryInterval=3600,
              UserProperty=[("unit", "C"), ("unit", "F"), ("site", "7")])
    assert pub.publish("req/dev1", b'{"t": 21}', 1, properties=p) == 0
    binary = props(CorrelationData=b"\xff\x00")
    assert pub.publish("req/dev2", b"x", 1, properties=binary) == 0
    assert pub.publish("req/dev3", b"plain", 0) == 0
    pub.close()
    published = time.time()
    server.kill()
    server.start()
    with amqp(server.amqp_port) as conn:
        got = consume(conn.channel(), "v5-worker", 3, idle=1.0)
    assert [(m.routing_key, body) for m, _p, body in got] == [
        ("req.dev1", b'{"t": 21}'), ("req.dev2", b"x")]  # (QoS 0 was transient)
    bp = got[0][1]
    assert (bp.content_type, bp.correlation_id, bp.delivery_mode) == \
        ("application/json", "c-1", 2)
    assert bp.headers == {"site": "7", "unit": "C", "x-reply-to-topic": "rep.dev1"}
    assert bp.expiration == "3600000" and time.time() - published < 60
    assert got[1][1].correlation_id is None
    assert got[1][1].headers == {"x-correlation-id": b"\xff\x00"}


def test_megabytes_of_user_properties_reach_a_small_frame_consumer_budgeted(
        start_server: Start) -> None:  # fmt: skip
    server = start_server()
    _bound_queue(server.amqp_port)
    pub = Client5(server.mqtt_port, "v5-props")
    pub.connect()
    heavy = props(UserProperty=[("first", "1")] + [(f"p{i}", "y" * 1000) for i in range(1000)])
    assert pub.publish("req/heavy", b"body", 1, properties=heavy) == 0
    pub.close()
    params = pika.ConnectionParameters("127.0.0.1", server.amqp_port, frame_max=4096,
                                       socket_timeout=5, connection_attempts=1)
    with pika.BlockingConnection(params) as conn:  # the smallest frame_max there is
        got = consume(conn.channel(), "v5-worker", 1)
    (_m, bp, body), = got
    assert body == b"body" and bp.headers["first"] == "1" and len(bp.headers) == 4
    assert status(server)["mqtt_amqp"]["user_properties_dropped"] == 997


def test_amqp_publish_reaches_a_v5_session_with_properties_after_sigkill(
        start_server: Start) -> None:  # fmt: skip
    server = start_server()
    live = Client5(server.mqtt_port, "v5-live")
    live.connect()
    assert live.subscribe("cmd/#", 1) == [1]
    stored = Client5(server.mqtt_port, "v5-stored")
    stored.connect(properties=props(1, SessionExpiryInterval=3600))
    assert stored.subscribe("cmd/#", 1) == [1]
    stored.disconnect()
    with amqp(server.amqp_port) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("amq.topic", "cmd.valve7", b"open", pika.BasicProperties(
            content_type="text/plain", delivery_mode=2, correlation_id="op-42",
            expiration="3600000",
            headers={"x-reply-to-topic": "rep.valve7", "who": "ops", "n": 3, "bin": b"\x01"}))
        ch.basic_publish("amq.topic", "cmd.valve8", b"shut", pika.BasicProperties(
            delivery_mode=2, headers={"x-correlation-id": "long" * 100}))
    want = {"ContentType": "text/plain", "CorrelationData": b"op-42",
            "ResponseTopic": "rep/valve7", "UserProperty": [("who", "ops"), ("n", "3")]}
    for client in (live,):
        m = client.get()
        assert (m.topic, m.payload, m.qos) == ("cmd/valve7", b"open", 1)
        assert {k: getattr(m.properties, k) for k in want} == want
        assert 3590 < m.properties.MessageExpiryInterval <= 3600
        assert client.get().properties.CorrelationData == b"long" * 100
    live.close()
    server.kill()
    server.start()
    stored = Client5(server.mqtt_port, "v5-stored")
    assert stored.connect(clean_start=False, properties=props(1, SessionExpiryInterval=3600)
                          )[0]  # fmt: skip
    m = stored.get()
    assert (m.topic, m.payload) == ("cmd/valve7", b"open")
    assert {k: getattr(m.properties, k) for k in want} == want
    assert 3500 < m.properties.MessageExpiryInterval <= 3600
    m = stored.get()
    assert m.properties.CorrelationData == b"long" * 100
    assert not hasattr(m.properties, "ContentType")
    stored.close()


def test_ingest_documents_get_props(start_server: Start) -> None:
    server = start_server()
    server.cli("ingest", "add", "lab/#:lab")
    pub = Client5(server.mqtt_port, "v5-lab")
    pub.connect()
    p = props(ContentType="application/json", UserProperty=[("unit", "C"), ("unit", "F")])
    assert pub.publish("lab/t1", b'{"v": 1}', 1, properties=p) == 0
    assert pub.publish("lab/t2", b'{"v": 2}', 1) == 0  # no properties: no _props
    pub.close()
    with amqp(server.amqp_port) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("amq.topic", "lab.t3", b"3", pika.BasicProperties(
            delivery_mode=2, content_type="text/plain", headers={"k": "v", "n": 1}))
    docs = {d["_topic"]: d for d in find(server, "lab")}
    assert docs["lab/t1"]["_props"] == {"content_type": "application/json",
                                        "user_properties": [["unit", "C"], ["unit", "F"]]}
    assert "_props" not in docs["lab/t2"]
    assert docs["lab/t3"]["_props"] == {"content_type": "text/plain",
                                        "user_properties": [["k", "v"], ["n", "1"]]}

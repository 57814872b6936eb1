"""Shared subscriptions ``$share/GROUP/FILTER`` against a real ``oxiedge serve``: MQTT 5
(paho-mqtt and a raw client) and 3.1.1 clients, one delivery per group, the round robin
that skips a member at its Receive Maximum, un-acknowledged messages of an ending member
handed to another one, a persistent member's share across a SIGKILL, and its messages
in flight at a SIGKILL re-sent or handed to another member after the restart."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

from oxiedge.mqtt.packets5 import (
    Disconnect5,
    Publish5,
    Suback5,
    Subscribe5,
    Subscription,
)
from oxiedge.mqtt.properties import Properties
from tests.conftest import ServerProcess

from .conftest import Client
from .paho5 import Client5, props
from .paho5 import Make5 as Make
from .test_mqtt5_durability import Raw5


def drain(c: Client5 | Client) -> list[bytes]:
    got = []
    while True:
        try:
            got.append(c.messages.get(timeout=0.5).payload)
        except queue.Empty:
            return got


def test_one_delivery_per_group_round_robin_mqtt5(shared_mqtt: ServerProcess, v5: Make) -> None:
    port = shared_mqtt.mqtt_port
    a, b, plain = v5(port, "sh-a"), v5(port, "sh-b"), v5(port, "sh-plain")
    for c in (a, b, plain):
        _present, p = c.connect()
    assert p is not None and p.SharedSubscriptionAvailable == 1
    pub = v5(port, "sh-pub")
    pub.connect()
    pub.publish("sh5/t", b"retained", 1, retain=True)
    assert a.subscribe("$share/g/sh5/#", 1) == [1]
    assert b.subscribe("$share/g/sh5/#", 2) == [2]
    assert plain.subscribe("sh5/#", 1) == [1]
    assert plain.get().payload == b"retained"
    assert a.nothing() and b.nothing()  # no retained messages on a shared subscription
    sent = [f"m{i}".encode() for i in range(10)]
    for m in sent:
        assert pub.publish("sh5/t", m, 1) == 0
    got_a, got_b = drain(a), drain(b)
    assert sorted(got_a + got_b) == sorted(sent)  # each message once in the group
    assert len(got_a) == len(got_b) == 5  # in turn
    assert sorted(drain(plain)) == sorted(sent)  # an ordinary subscription gets them all
    # The same filter in another group: that group gets its own copy.
    other = v5(port, "sh-c")
    other.connect()
    assert other.subscribe("$share/h/sh5/#", 0) == [0]
    pub.publish("sh5/t", b"both", 1)
    assert other.get().payload == b"both"
    assert len(drain(a) + drain(b)) == 1
    pub.publish("sh5/t", b"", 0, retain=True)
    assert pub.publish("$share/g/sh5/t", b"x", 1) == 0x87  # no topic (as Mosquitto)
    # A bad share: no share name, a wildcard in it, no filter.
    raw = Raw5(port)
    raw.connect("sh-bad", props=Properties())
    raw.send(Subscribe5(1, tuple(Subscription(f, 1) for f in
                                 ("$share//x", "$share/a+/x", "$share/g", "$share/g/"))))
    assert raw.next() == Suback5(1, (0x8F,) * 4)
    raw.close()


def test_shared_between_mqtt311_clients(shared_mqtt: ServerProcess,
                                        clients: Callable[..., Client]) -> None:  # fmt: skip
    port = shared_mqtt.mqtt_port
    a, b = clients(port, "sh3-a"), clients(port, "sh3-b")
    for c in (a, b):
        c.connect()
        assert c.subscribe(("$share/g3/sh3/+", 1)) == [1]
    pub = clients(port, "sh3-pub")
    pub.connect()
    for i in range(6):
        pub.publish(f"sh3/{i}", f"{i}", 1)
    got_a, got_b = drain(a), drain(b)
    assert len(got_a) == len(got_b) == 3 and sorted(got_a + got_b) == [
        str(i).encode() for i in range(6)]
    # A member that leaves (its clean session ends) leaves the rest of the group.
    a.disconnect()
    pub.publish("sh3/x", "after", 1)
    assert b.get().payload == b"after"


def test_round_robin_skips_a_member_at_its_receive_maximum(shared_mqtt: ServerProcess,
                                                           v5: Make) -> None:  # fmt: skip
    port = shared_mqtt.mqtt_port
    slow = Raw5(port)
    slow.connect("rm-slow", props=Properties(receive_maximum=1))
    slow.send(Subscribe5(1, (Subscription("$share/rm/rm5/t", 1),)))
    assert slow.next() == Suback5(1, (1,))
    fast = v5(port, "rm-fast")
    fast.connect()
    fast.subscribe("$share/rm/rm5/t", 1)
    pub = v5(port, "rm-pub")
    pub.connect()
    for i in range(4):
        assert pub.publish("rm5/t", f"{i}".encode(), 1) == 0
    first = slow.next()  # never acknowledged: the slow member's window stays full
    assert isinstance(first, Publish5) and first.payload == b"0"
    assert sorted(drain(fast)) == [b"1", b"2", b"3"]
    # Its session ends (clean, the connection closes) with the message un-acknowledged:
    # the message goes to the other member (4.8.2).
    slow.close()
    assert fast.get().payload == b"0"


def test_no_local_on_a_shared_subscription_is_a_protocol_error(shared_mqtt: ServerProcess
                                                               ) -> None:  # fmt: skip
    c = Raw5(shared_mqtt.mqtt_port)
    c.connect("nl-share", props=Properties())
    c.send(Subscribe5(1, (Subscription("$share/g/nl/t", 1, no_local=True),)))
    assert c.next() == Disconnect5(0x82)  # MQTT-3.8.3-4
    c.close()


def test_persistent_members_keep_their_share_across_sigkill(
        start_mqtt: Callable[..., ServerProcess], v5: Make,
        clients: Callable[..., Client]) -> None:  # fmt: skip
    srv = start_mqtt()
    m5 = Raw5(srv.mqtt_port)
    m5.connect("k-m5")  # Session Expiry Interval 3600
    m5.send(Subscribe5(1, (Subscription("$share/k/ks/#", 1),)))
    assert m5.next() == Suback5(1, (1,))
    m5.close()
    m3 = clients(srv.mqtt_port, "k-m3", clean=False)
    m3.connect()
    assert m3.subscribe(("$share/k/ks/#", 1)) == [1]
    m3.drop()
    srv.kill()

    srv.start()
    pub = v5(srv.mqtt_port, "k-pub")
    pub.connect()
    # Both members offline: each message waits in one member's queue.
    for i in range(4):
        assert pub.publish("ks/t", f"{i}".encode(), 1, properties=props(ContentType="c")) == 0
    m5 = Raw5(srv.mqtt_port)
    assert m5.connect("k-m5", clean_start=False).session_present
    m3 = clients(srv.mqtt_port, "k-m3", clean=False)
    assert m3.connect() is True
    got5 = []
    while True:
        m5.sock.settimeout(1.0)
        try:
            p = m5.next()
        except TimeoutError:
            break
        assert isinstance(p, Publish5)
        got5.append(p.payload)
    got3 = drain(m3)
    assert sorted(got5 + got3) == [b"0", b"1", b"2", b"3"]
    m5.close()


def test_a_share_is_checked_by_the_read_rules_of_its_filter(
        start_mqtt: Callable[..., ServerProcess], v5: Make, tmp_path: Path) -> None:  # fmt: skip
    data = tmp_path / "acl-data"
    subprocess.run([sys.executable, "-m", "oxiedge", "acl", "add", "readwrite", "ok/#",
                    "--pattern", "--data", str(data)], check=True, capture_output=True,
                   timeout=60)  # fmt: skip
    srv = start_mqtt(data=data)
    c = v5(srv.mqtt_port, "acl-share")
    c.connect()
    # ("$share/..." itself matches no rule: "#" never matches a topic that starts with $)
    assert c.subscribe("$share/g/ok/#", 1) == [1]
    assert c.subscribe("$share/g/no/#", 1) == [0x80]
    assert c.publish("ok/x", b"mine", 1) == 0
    assert c.get().payload == b"mine"


def _publishes(c: Raw5, wait: float = 1.0) -> list[Publish5]:
    """Every PUBLISH that arrives until ``wait`` seconds pass without one (none acked)."""
    got = []
    while True:
        c.sock.settimeout(wait)
        try:
            p = c.next()
        except TimeoutError:
            return got
        assert isinstance(p, Publish5), p
        got.append(p)


def test_unacked_shared_messages_survive_a_sigkill(start_mqtt: Callable[..., ServerProcess],
                                                   v5: Make) -> None:  # fmt: skip
    # Two persistent members of one group receive QoS 1 messages and acknowledge none; the
    # server is killed. After the restart the first member's session re-sends its own
    # (DUP), and the second member's, whose client comes back with Clean Start (its
    # session ends), go to the first: every message the publisher had acknowledged
    # arrives, none twice.
    srv = start_mqtt("--http-port", "0")
    members = [Raw5(srv.mqtt_port), Raw5(srv.mqtt_port)]
    for i, m in enumerate(members):
        m.connect(f"sk-m{i}")  # Session Expiry Interval 3600
        m.send(Subscribe5(1, (Subscription("$share/sk/sk/#", 1),)))
        assert m.next() == Suback5(1, (1,))
    pub = v5(srv.mqtt_port, "sk-pub")
    pub.connect()
    sent = [f"m{i}".encode() for i in range(20)]
    for payload in sent:
        assert pub.publish("sk/t", payload, 1) == 0  # acknowledged: on disk
    before = [[p.payload for p in _publishes(m)] for m in members]
    assert sorted(before[0] + before[1]) == sorted(sent)
    assert before[0] and before[1]  # (round robin: both had some in flight)
    srv.kill()  # before any PUBACK from the members

    srv.start()
    first = Raw5(srv.mqtt_port)
    assert first.connect("sk-m0", clean_start=False).session_present
    again = _publishes(first)
    assert [p.payload for p in again] == before[0] and all(p.dup for p in again)
    second = Raw5(srv.mqtt_port)
    second.connect("sk-m1", clean_start=True)  # its session, and its share, end
    handed = _publishes(first)
    assert sorted(p.payload for p in handed) == sorted(before[1])
    assert sorted(p.payload for p in again + handed) == sorted(sent)
    assert _publishes(second, 0.3) == []
    status = json.loads(srv.cli("status", "--json").stdout)
    assert status["mqtt"]["shared_handed_on"] == len(before[1])
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.http_port}/metrics", timeout=10) as r:
        metrics = r.read().decode()  # (a counter: Prometheus' rate() works on it)
    assert f"oxiedge_mqtt_shared_handed_on_total {len(before[1])}" in metrics.splitlines()
    assert "# TYPE oxiedge_mqtt_shared_handed_on_total counter" in metrics
    for m in (first, second, *members):
        m.close()

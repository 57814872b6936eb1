"""paho-mqtt against a real ``oxiedge serve``: every broker feature end to end."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oxiedge.mqtt.codec import encode
from oxiedge.mqtt.packets import Subscribe
from tests.conftest import ServerProcess as Server

from .conftest import ROOT, Client, cli_rows
from .rawclient import RawClient

Make = Callable[..., Client]


def test_pub_sub_qos0_and_ping(shared_mqtt: Server, clients: Make) -> None:
    sub = clients(shared_mqtt.mqtt_port, "sub")
    assert sub.connect(keepalive=5) is False
    assert sub.subscribe(("a/b", 0)) == [0]
    pub = clients(shared_mqtt.mqtt_port, "pub")
    pub.connect()
    pub.publish("a/b", b"hello")
    m = sub.get()
    assert (m.topic, m.payload, m.qos, m.retain) == ("a/b", b"hello", 0, False)
    raw = RawClient(shared_mqtt.mqtt_port)
    raw.connect("pinger")
    raw.send(b"\xc0\x00")
    assert raw.recv_packet() == b"\xd0\x00"


def test_wildcards_and_dollar_topics(mqtt_server: Server, clients: Make) -> None:
    port = mqtt_server.mqtt_port
    plus, hash_, all_, sys_ = (clients(port, n) for n in ("plus", "hash", "all", "sys"))
    for c in (plus, hash_, all_, sys_):
        c.connect()
    assert plus.subscribe(("s/+/t", 1)) == [1]
    assert hash_.subscribe(("s/#", 1)) == [1]
    assert all_.subscribe(("#", 1), ("+/x", 1)) == [1, 1]
    # A $-topic a client may publish to ($SYS is the broker's own: tests/mqtt/test_systree.py).
    assert sys_.subscribe(("$ext/#", 1)) == [1]
    pub = clients(port, "pub")
    pub.connect()
    for topic in ("s", "s/a/t", "s/a/b/t", "$ext/x"):
        pub.publish(topic, topic.encode(), qos=1)
    assert [m.topic for m in plus.get_n(1)] == ["s/a/t"]
    # "s/#" matches the parent "s" too (4.7.1.2).
    assert [m.topic for m in hash_.get_n(3)] == ["s", "s/a/t", "s/a/b/t"]
    # "#" does not match $-topics (MQTT-4.7.2-1); "$ext/#" does.
    assert [m.topic for m in all_.get_n(3)] == ["s", "s/a/t", "s/a/b/t"]
    assert [m.topic for m in sys_.get_n(1)] == ["$ext/x"]
    for c in (plus, hash_, all_, sys_):
        c.assert_nothing(0.2)


def test_invalid_filter_gets_failure_code(shared_mqtt: Server) -> None:
    # paho refuses to send bad filters, so this one speaks raw bytes.
    raw = RawClient(shared_mqtt.mqtt_port)
    raw.connect("badfilter")
    raw.send(encode(Subscribe(9, (("a/#/b", 0), ("ok/+", 2), ("a+", 1)))))
    assert raw.recv_packet() == b"\x90\x05\x00\x09\x80\x02\x80"


def test_qos_matrix_effective_qos_is_min(shared_mqtt: Server, clients: Make) -> None:
    port = shared_mqtt.mqtt_port
    subs = {}
    for granted in (0, 1, 2):
        c = clients(port, f"sub{granted}")
        c.connect()
        assert c.subscribe((f"q/{granted}/#", granted)) == [granted]
        subs[granted] = c
    pub = clients(port, "pub")
    pub.connect()
    for pub_qos in (0, 1, 2):
        for granted in (0, 1, 2):
            pub.publish(f"q/{granted}/{pub_qos}", f"{pub_qos}".encode(), qos=pub_qos)
    for granted, c in subs.items():
        got = sorted((m.topic, m.qos) for m in c.get_n(3))
        assert got == [(f"q/{granted}/{q}", min(q, granted)) for q in (0, 1, 2)]


def test_overlapping_subscriptions_one_copy_max_qos(shared_mqtt: Server, clients: Make) -> None:
    c = clients(shared_mqtt.mqtt_port, "overlap")
    c.connect()
    c.subscribe(("o/#", 0), ("o/+", 2))
    pub = clients(shared_mqtt.mqtt_port, "pub")
    pub.connect()
    pub.publish("o/x", b"1", qos=2)
    m = c.get()
    assert (m.topic, m.qos) == ("o/x", 2)
    c.assert_nothing(0.3)


def test_retained_set_replace_clear(mqtt_server: Server, clients: Make) -> None:
    port = mqtt_server.mqtt_port
    pub = clients(port, "pub")
    pub.connect()
    pub.publish("r/a", b"v1", qos=1, retain=True)
    pub.publish("r/a", b"v2", qos=1, retain=True)  # replaces
    pub.publish("r/b/c", b"deep", qos=0, retain=True)
    pub.publish("r/gone", b"x", qos=1, retain=True)
    pub.publish("r/gone", b"", qos=1, retain=True)  # clears
    s1 = clients(port, "s1")
    s1.connect()
    s1.subscribe(("r/#", 1))
    got = sorted((m.topic, m.payload, m.retain, m.qos) for m in s1.get_n(2))
    assert got == [("r/a", b"v2", True, 1), ("r/b/c", b"deep", True, 0)]
    s1.assert_nothing(0.2)
    # A live publish to an existing subscription has retain=0 (MQTT-3.3.1-9).
    pub.publish("r/a", b"v3", qos=1, retain=True)
    m = s1.get()
    assert (m.payload, m.retain) == (b"v3", False)
    s2 = clients(port, "s2")
    s2.connect()
    s2.subscribe(("r/+", 0))
    m = s2.get()
    assert (m.topic, m.payload, m.retain, m.qos) == ("r/a", b"v3", True, 0)
    s2.assert_nothing(0.2)


def test_will_on_abnormal_disconnect_only(mqtt_server: Server, clients: Make) -> None:
    port = mqtt_server.mqtt_port
    watcher = clients(port, "watcher")
    watcher.connect()
    watcher.subscribe(("will/#", 1))
    polite = clients(port, "polite")
    polite.connect(will=("will/polite", b"gone", 1, False))
    polite.disconnect()
    rude = clients(port, "rude")
    rude.connect(will=("will/rude", b"lost", 1, True))
    rude.drop()
    m = watcher.get()
    assert (m.topic, m.payload, m.qos) == ("will/rude", b"lost", 1)
    watcher.assert_nothing(0.3)
    late = clients(port, "late")
    late.connect()
    late.subscribe(("will/+", 1))
    m = late.get()  # the will was retained
    assert (m.topic, m.payload, m.retain) == ("will/rude", b"lost", True)


def test_will_on_protocol_error(shared_mqtt: Server, clients: Make) -> None:
    watcher = clients(shared_mqtt.mqtt_port, "watcher")
    watcher.connect()
    watcher.subscribe(("will2/#", 0))
    raw = RawClient(shared_mqtt.mqtt_port)
    raw.connect("bad", will=("will2/bad", b"bye", 0))
    raw.send(b"\x30\x03\x00\x01#")  # wildcard in a PUBLISH topic: close (MQTT-3.3.2-2)
    assert raw.closed()
    assert watcher.get().payload == b"bye"


def test_session_takeover(shared_mqtt: Server, clients: Make) -> None:
    port = shared_mqtt.mqtt_port
    first = clients(port, "dup-id", clean=False)
    first.connect(will=("tkw/dup", b"old", 0, False))
    first.subscribe(("t/#", 1))
    watcher = clients(port, "watcher")
    watcher.connect()
    watcher.subscribe(("tkw/#", 0))
    second = clients(port, "dup-id", clean=False)
    assert second.connect() is True  # the persistent session carries over
    assert first.disconnected.wait(10), "old connection not closed (MQTT-3.1.4-2)"
    first.c.loop_stop()
    pub = clients(port, "pub")
    pub.connect()
    for i in range(5):
        pub.publish("t/x", str(i).encode(), qos=1)
    assert [m.payload for m in second.get_n(5)] == [str(i).encode() for i in range(5)]
    second.assert_nothing(0.3)
    first.assert_nothing(0.01)
    # A persistent session taken over by a persistent one goes on: no will (Mosquitto 2,
    # MQTT 5; the Mosquitto test 07-will-takeover).
    watcher.assert_nothing(0.01)


def test_takeover_by_a_clean_session_publishes_the_will(
    shared_mqtt: Server, clients: Make
) -> None:
    port = shared_mqtt.mqtt_port
    watcher = clients(port, "watcher-c")
    watcher.connect()
    watcher.subscribe(("tkc/#", 0))
    first = clients(port, "dup-clean", clean=False)
    first.connect(will=("tkc/dup", b"gone", 0, False))
    second = clients(port, "dup-clean", clean=True)
    assert second.connect() is False  # clean: the old session ended, and with it its will
    assert first.disconnected.wait(10), "old connection not closed (MQTT-3.1.4-2)"
    first.c.loop_stop()
    assert watcher.get().payload == b"gone"


def test_keepalive_timeout_closes_and_sends_will(shared_mqtt: Server, clients: Make) -> None:
    watcher = clients(shared_mqtt.mqtt_port, "watcher")
    watcher.connect()
    watcher.subscribe(("ka/#", 0))
    raw = RawClient(shared_mqtt.mqtt_port)
    start = time.monotonic()
    raw.connect("sleepy", keepalive=1, will=("ka/sleepy", b"timeout", 0))
    assert raw.closed(timeout=5)
    elapsed = time.monotonic() - start
    assert 1.4 <= elapsed < 3.5, elapsed  # 1.5 x keep-alive (MQTT-3.1.2-24)
    assert watcher.get().payload == b"timeout"


def test_keepalive_respected_by_pings(shared_mqtt: Server) -> None:
    raw = RawClient(shared_mqtt.mqtt_port)
    raw.connect("pinging", keepalive=1)
    for _ in range(4):
        time.sleep(0.5)
        raw.send(b"\xc0\x00")
        assert raw.recv_packet() == b"\xd0\x00"


def test_persistent_session_offline_queue(shared_mqtt: Server, clients: Make) -> None:
    port = shared_mqtt.mqtt_port
    sub = clients(port, "durable", clean=False)
    assert sub.connect() is False
    sub.subscribe(("d/#", 2))
    sub.disconnect()
    pub = clients(port, "pub")
    pub.connect()
    for i in range(10):
        pub.publish("d/x", f"m{i}".encode(), qos=1 + i % 2)
    pub.publish("d/x", b"qos0-skipped", qos=0)  # QoS 0 is not queued for offline sessions
    again = clients(port, "durable", clean=False)
    assert again.connect() is True
    got = again.get_n(10)
    # paho hands QoS 2 messages over at PUBREL, so order holds per QoS level (4.6).
    for qos in (1, 2):
        assert [(m.payload, m.qos) for m in got if m.qos == qos] == [
            (f"m{i}".encode(), qos) for i in range(10) if 1 + i % 2 == qos
        ]
    again.assert_nothing(0.3)
    again.disconnect()
    # A clean connect discards the session (MQTT-3.1.2-6).
    clean = clients(port, "durable", clean=True)
    assert clean.connect() is False
    clean.disconnect()
    back = clients(port, "durable", clean=False)
    assert back.connect() is False


def test_queue_bound_drops_oldest(start_mqtt: Callable[..., Server], clients: Make) -> None:
    srv = start_mqtt("--mqtt-queue-limit", "5")
    sub = clients(srv.mqtt_port, "bounded", clean=False)
    sub.connect()
    sub.subscribe(("b/#", 1))
    sub.disconnect()
    pub = clients(srv.mqtt_port, "pub")
    pub.connect()
    for i in range(12):
        pub.publish("b/x", str(i).encode(), qos=1)
    rows = cli_rows(srv, "sessions")
    row = next(r for r in rows if r["client"] == "bounded")
    assert (row["queued"], row["dropped"], row["connected"]) == (5, 7, False)
    again = clients(srv.mqtt_port, "bounded", clean=False)
    again.connect()
    assert [m.payload for m in again.get_n(5)] == [str(i).encode() for i in range(7, 12)]
    again.assert_nothing(0.3)


def test_auth_with_password_file(start_mqtt: Callable[..., Server], tmp_path: Path,
                                 clients: Make) -> None:  # fmt: skip
    data = tmp_path / "authdata"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run(
        [sys.executable, "-m", "oxiedge", "user", "add", "alice", "--password-stdin",
         "--data", str(data)],
        input="s3cret\n", capture_output=True, text=True, timeout=60, env=env, cwd=ROOT,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    srv = start_mqtt(data=data)
    port = srv.mqtt_port
    clients(port, "good").connect(auth=("alice", "s3cret"))
    clients(port, "wrongpw").connect(auth=("alice", "nope"), expect_rc=4)
    clients(port, "nouser").connect(auth=("bob", "s3cret"), expect_rc=4)
    clients(port, "anon").connect(expect_rc=5)  # users exist: anonymous refused


def test_connack_codes_raw(shared_mqtt: Server) -> None:
    port = shared_mqtt.mqtt_port
    # A protocol level the broker does not speak -> return code 1 (MQTT-3.1.2-2), then close.
    raw = RawClient(port)
    raw.send(b"\x10\x0e\x00\x04MQTT\x06\x02\x00\x3c\x00\x00\x00\x00")
    assert raw.recv_packet() == b"\x20\x02\x00\x01"
    assert raw.closed()
    # Empty client id with clean_session=0 -> 2 (MQTT-3.1.3-8).
    raw = RawClient(port)
    assert raw.connect("", clean=False, expect=None) == b"\x20\x02\x00\x02"
    assert raw.closed()
    # Empty client id with clean_session=1 -> accepted with an assigned id.
    raw = RawClient(port)
    assert raw.connect("", clean=True) == b"\x20\x02\x00\x00"


def test_no_mqtt_persist(start_mqtt: Callable[..., Server], clients: Make) -> None:
    srv = start_mqtt("--no-mqtt-persist")
    assert "MQTT persistence off - sessions live in memory only" in srv.log_lines
    sub = clients(srv.mqtt_port, "mem", clean=False)
    sub.connect()
    sub.subscribe(("m/#", 1))
    sub.disconnect()
    pub = clients(srv.mqtt_port, "pub")
    pub.connect()
    pub.publish("m/1", b"x", qos=1, retain=True)
    again = clients(srv.mqtt_port, "mem", clean=False)
    assert again.connect() is True  # in memory while the server runs
    assert again.get().payload == b"x"
    srv.kill()
    srv.start()
    assert "MQTT persistence off - sessions live in memory only" in srv.log_lines
    after = clients(srv.mqtt_port, "mem", clean=False)
    assert after.connect() is False


def test_paho_protocol_versions(shared_mqtt: Server) -> None:
    import paho.mqtt.client as mqtt

    port = shared_mqtt.mqtt_port
    v31 = Client(port, "v31", protocol=mqtt.MQTTv31)  # "MQIsdp" level 3: accepted
    try:
        v31.connect()
        v31.subscribe(("v31/t", 1))
        v31.publish("v31/t", b"old protocol", qos=1)
        assert v31.get().payload == b"old protocol"
    finally:
        v31.disconnect()
    v5 = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="v5", protocol=mqtt.MQTTv5)
    codes: queue.Queue[Any] = queue.Queue()
    v5.on_connect = lambda _c, _u, _f, rc, _p: codes.put(rc)
    assert port is not None
    v5.connect("127.0.0.1", port)
    v5.loop_start()
    try:
        assert not codes.get(timeout=10).is_failure  # MQTT 5 is served (test_mqtt5_*.py)
    finally:
        v5.disconnect()
        v5.loop_stop()

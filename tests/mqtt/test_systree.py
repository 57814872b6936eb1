"""``$SYS/broker/...`` (mqtt/systree.py): Mosquitto's topic names, retained QoS 0, never
persisted, subject to the read rules; clients may not publish there. Real server, paho and
mosquitto_sub; the values and load averages sans-IO."""

from __future__ import annotations

import queue
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pika
import pytest

from oxiedge.mqtt.broker import Broker
from oxiedge.mqtt.session import Limits, Message
from oxiedge.mqtt.systree import SysTree
from oxiedge.net.output import Traffic
from tests.conftest import ServerProcess, run_cli
from tests.mqtt.conftest import Client

MOSQUITTO_NAMES = [
    "version", "uptime", "clients/connected", "clients/disconnected", "clients/total",
    "clients/maximum", "messages/received", "messages/sent", "messages/stored",
    "publish/messages/received", "publish/messages/sent", "publish/messages/dropped",
    "bytes/received", "bytes/sent", "load/messages/received/1min",
    "load/messages/received/5min", "load/messages/received/15min", "load/messages/sent/1min",
    "load/bytes/received/1min", "load/bytes/sent/15min", "load/connections/5min",
    "load/publish/dropped/1min", "subscriptions/count", "retained messages/count",
    "store/messages/count", "store/messages/bytes"]
LONG = 60.0  # seconds a message may take to come on a loaded machine (a ceiling, not a bound)


def sys_values(c: Client, names: list[str]) -> dict[str, tuple[str, bool]]:
    """$SYS messages until each of ``names`` came: name -> (first value, its retain flag)."""
    seen: dict[str, tuple[str, bool]] = {}
    while not set(names) <= set(seen):
        m = c.get(LONG)
        seen.setdefault(m.topic.removeprefix("$SYS/broker/"), (m.payload.decode(), m.retain))
    return seen


def test_sys_topics_with_mosquittos_names(start_server: Callable[..., ServerProcess],
                                          clients: Callable[..., Client]) -> None:
    srv = start_server("--sys-interval", "1")
    pub = clients(srv.mqtt_port, "sys-pub")
    pub.connect()
    pub.publish("plain/t", b"x" * 10, qos=1, retain=True)
    sub = clients(srv.mqtt_port, "sys-sub")
    sub.connect()
    assert sub.subscribe(("$SYS/#", 0)) == [0]
    first = sys_values(sub, MOSQUITTO_NAMES)  # the retained values, replayed on subscribe
    assert all(retain for _value, retain in first.values())
    assert first["version"][0].startswith("oxiedge version ")
    assert first["uptime"][0].endswith(" seconds")
    # Counters changed after the replay: a later round brings them live (retain 0 on a
    # live delivery, MQTT-3.3.1-9). (A round between the first publish and the subscribe
    # may already have retained 1 publish and 2 clients: the test moves them on itself.)
    third = clients(srv.mqtt_port, "sys-third")
    third.connect()
    pub.publish("plain/t", b"y" * 10, qos=1, retain=True)
    wanted = {"clients/connected": b"3", "publish/messages/received": b"2"}
    live: dict[str, bytes] = {}
    deadline = time.monotonic() + 120  # a round a second; a loaded machine delays them
    while not (wanted.items() <= live.items() and "bytes/received" in live):
        try:
            m = sub.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail(f"live $SYS values {live}, wanted {wanted}")
        name = m.topic.removeprefix("$SYS/broker/")
        if not m.retain and name in (*wanted, "bytes/received"):
            live[name] = m.payload  # the latest value: the counters only grow
    assert int(live["bytes/received"]) > int(first["bytes/received"][0])


def test_sys_is_not_matched_by_hash_and_cannot_be_published(
        start_server: Callable[..., ServerProcess], clients: Callable[..., Client]) -> None:
    srv = start_server("--sys-interval", "1")
    everything = clients(srv.mqtt_port, "all")
    everything.connect()
    everything.subscribe(("#", 0), ("+/broker/uptime", 0))  # MQTT-4.7.2-1: no $SYS
    sysub = clients(srv.mqtt_port, "sys-only")
    sysub.connect()
    sysub.subscribe(("$SYS/broker/version", 0))
    assert sysub.get(LONG).payload.startswith(b"oxiedge version")
    pub = clients(srv.mqtt_port, "faker")
    pub.connect()
    pub.publish("$SYS/broker/version", b"fake", qos=1)  # acknowledged, dropped
    pub.publish("check/done", b"ok", qos=1)
    assert everything.get(LONG).topic == "check/done"  # and nothing of $SYS before it
    sysub.assert_nothing(1.5)
    late = clients(srv.mqtt_port, "late")
    late.connect()
    late.subscribe(("$SYS/broker/version", 0))
    assert late.get(LONG).payload.startswith(b"oxiedge version")


def test_sys_follows_the_read_rules(start_server: Callable[..., ServerProcess],
                                    clients: Callable[..., Client], tmp_path: Path) -> None:
    data = tmp_path / "data"
    for user in ("watcher", "other"):
        assert run_cli(data, "user", "add", user, "--password-stdin",
                       input=f"{user}-pw\n").returncode == 0
    assert run_cli(data, "acl", "add", "read", "$SYS/broker/clients/#",
                   "--user", "watcher").returncode == 0
    assert run_cli(data, "acl", "add", "deny", "$SYS/broker/clients/maximum",
                   "--user", "watcher").returncode == 0
    assert run_cli(data, "acl", "add", "readwrite", "x/#", "--user", "other").returncode == 0
    srv = start_server("--sys-interval", "1", data=data)
    watcher = clients(srv.mqtt_port, "w")
    watcher.connect(auth=("watcher", "watcher-pw"))
    assert watcher.subscribe(("$SYS/#", 0), ("$SYS/broker/clients/+", 0)) == [0x80, 0]
    got = {m.topic for m in watcher.get_n(4, LONG)}
    assert got == {f"$SYS/broker/clients/{n}" for n in ("connected", "disconnected",
                                                        "total", "expired")}
    other = clients(srv.mqtt_port, "o")
    other.connect(auth=("other", "other-pw"))
    assert other.subscribe(("$SYS/broker/uptime", 0)) == [0x80]


def test_mosquitto_sub_reads_sys(start_server: Callable[..., ServerProcess]) -> None:
    if shutil.which("mosquitto_sub") is None:
        pytest.skip("mosquitto_sub not installed")
    srv = start_server("--sys-interval", "1")
    res = subprocess.run(["mosquitto_sub", "-h", "127.0.0.1", "-p", str(srv.mqtt_port), "-v",
                          "-t", "$SYS/broker/version", "-t", "$SYS/broker/load/#",
                          "-C", "5", "-W", "120"],
                         capture_output=True, text=True, timeout=150)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 5
    assert any(line.startswith("$SYS/broker/version oxiedge version") for line in lines)


def test_sys_interval_0_publishes_nothing_and_sys_is_never_persisted(
        start_server: Callable[..., ServerProcess], clients: Callable[..., Client],
        tmp_path: Path) -> None:
    srv = start_server("--sys-interval", "1")
    c = clients(srv.mqtt_port, "first")
    c.connect()
    c.subscribe(("$SYS/broker/version", 0))
    c.get(LONG)
    srv.kill()
    again = start_server("--sys-interval", "0", data=srv.data)
    c2 = clients(again.mqtt_port, "second")
    c2.connect()
    c2.subscribe(("$SYS/#", 0))
    c2.assert_nothing(1.5)  # nothing retained survived: it was never on disk
    assert "sys_rounds" not in again.cli("status", "--json").stdout


# ------------------------------------------------------------------ sans-IO


def test_values_and_load_averages_follow_the_counters() -> None:
    broker = Broker(None, Limits(queue_limit=100))
    traffic = Traffic()
    clock = [100.0]
    tree = SysTree(broker, traffic, version="9.9", interval=10, uptime=lambda: 42.9,
                   clock=lambda: clock[0])
    first = dict(tree.changed(clock[0]))
    assert first[b"$SYS/broker/uptime".decode()] == b"42 seconds"
    assert first["$SYS/broker/load/bytes/received/1min"] == b"0.00"
    traffic.received += 6000  # 6000 bytes in 60 s: 6000 per minute
    broker.stats.messages_in += 60
    clock[0] += 60
    second = dict(tree.changed(clock[0]))
    assert "$SYS/broker/version" not in second  # unchanged: not published again
    expected = 6000 * (1 - 2.718281828459045 ** -1)  # one time constant of the 1 min window
    assert second["$SYS/broker/load/bytes/received/1min"] == f"{expected:.2f}".encode()
    assert second["$SYS/broker/publish/messages/received"] == b"60"
    tree.publish("$SYS/broker/x", b"1")
    assert broker.retained.get("$SYS/broker/x") is not None
    assert isinstance(broker.retained.get("$SYS/broker/x").msg, Message)  # type: ignore[union-attr]


def test_no_will_and_no_amqp_publish_reaches_sys(start_server: Callable[..., ServerProcess],
                                                 clients: Callable[..., Client]) -> None:
    srv = start_server("--sys-interval", "0")  # nothing of the broker's own in the way
    watcher = clients(srv.mqtt_port, "watch")
    watcher.connect()
    watcher.subscribe(("$SYS/#", 0), ("done", 0))
    dying = clients(srv.mqtt_port, "dying")
    dying.connect(will=("$SYS/broker/version", b"will", 0, True))
    dying.drop()  # abnormal end: its will would go out now
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", srv.amqp_port))
    try:
        ch = conn.channel()
        ch.basic_publish("amq.topic", "$SYS.broker.uptime", b"from-amqp")
        ch.basic_publish("amq.topic", "done", b"1")
    finally:
        conn.close()
    m = watcher.get(LONG)
    assert (m.topic, m.payload) == ("done", b"1")
    watcher.assert_nothing(0.5)
    status = srv.cli("status", "--json").stdout
    assert '"mqtt_wills_denied": 1' in status.replace('":1', '": 1')

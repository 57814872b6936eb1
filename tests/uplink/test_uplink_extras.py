"""Uplink behaviour beyond the acceptance tests: RETAIN kept upstream, outboxes that lost
their uplink are kept (never deleted silently) until removed, AMQP names checked up front."""

from __future__ import annotations

import json
import queue
import threading
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest

from oxiedge.uplink.definitions import parse_definition
from oxiedge.uplink.link import LinkOptions, UplinkError

from .test_uplink_e2e import (
    Local,
    connected,
    delete_queues,
    unique,
    uplink_status,
    wait_log,
    wait_status,
)


def _retained_upstream(port: int, topic: str, timeout: float = 10.0) -> list[tuple[bytes, bool]]:
    """Subscribe on the upstream and collect what arrives with its RETAIN flag."""
    got: list[tuple[bytes, bool]] = []
    done = threading.Event()
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"ret-{time.monotonic_ns()}",
                    protocol=mqtt.MQTTv311)

    def on_message(_c: Any, _u: Any, m: Any) -> None:
        got.append((bytes(m.payload), bool(m.retain)))
        done.set()

    c.on_message = on_message
    c.on_connect = lambda cl, *_a: cl.subscribe(topic, qos=1)
    c.connect("127.0.0.1", port, keepalive=30)
    c.loop_start()
    try:
        done.wait(timeout)
    finally:
        c.disconnect()
        c.loop_stop()
    return got


def test_retained_messages_stay_retained_upstream(mosquitto: Any, start_server: Any) -> None:
    dev = unique("r")
    srv = start_server("--device-id", dev)
    srv.cli("uplink", "add", "up1", mosquitto.url(), "--out", "status/#", "--prefix", f"{dev}/")
    wait_status(srv, "up1", lambda s: s["state"] == "connected", "connected")
    with Local(srv.mqtt_port) as pub:
        mid = pub.c.publish("status/pump", b"running", qos=1, retain=True).mid
        assert pub.wait_acked([mid])
    wait_status(srv, "up1", lambda s: s["confirmed"] == 1, "forwarded")
    # A subscriber that arrives later gets it as a retained message.
    assert _retained_upstream(mosquitto.port, f"{dev}/status/pump") == [(b"running", True)]


def test_an_outbox_without_its_uplink_is_kept_until_removed(tmp_path: Path,
                                                           start_server: Any) -> None:
    cfg = tmp_path / "oxiedge.toml"
    cfg.write_text('[uplink.gone]\nurl = "mqtt://127.0.0.1:1"\nout = ["sensors/#"]\n')
    data = tmp_path / "data"
    srv = start_server("--config", str(cfg), data=data)
    with Local(srv.mqtt_port) as pub:
        pub.publish_all([(f"sensors/{i}", b"x") for i in range(3)])
    wait_status(srv, "gone", lambda s: s["backlog_messages"] == 3, "backlog 3")
    srv.stop()
    # The uplink left the config file: its backlog is kept and said, not deleted.
    srv2 = start_server(data=data)
    line = wait_log(srv2, "uplink gone is not configured")
    assert "keeps 3 unsent message(s)" in line
    r = srv2.cli("uplink", "remove", "gone")
    assert "3 unsent message(s) discarded" in r.stdout
    srv2.stop()
    srv3 = start_server(data=data)
    assert srv3.line("uplink gone is not configured") is None
    assert json.loads(srv3.cli("uplink", "status", "--json").stdout) == {}


def test_amqp_names_must_have_a_routing_key_form() -> None:
    base = {"name": "x", "url": "amqp://h"}
    with pytest.raises(UplinkError, match="prefix"):
        parse_definition({**base, "out": ["a"], "prefix": "site.{device}."})
    with pytest.raises(UplinkError, match=r"--out filter 'v1\.2/#'"):
        parse_definition({**base, "out": ["v1.2/#"]})
    with pytest.raises(UplinkError, match="--in filter"):
        parse_definition({**base, "in": ["cmd//x"]})
    ok = parse_definition({**base, "out": ["a/+/#"], "prefix": "site/{device}/"})
    assert ok.out == ("a/+/#",)
    # MQTT has no such limit: a '.' is an ordinary character there.
    assert parse_definition({"name": "x", "url": "mqtt://h", "out": ["v1.2/#"],
                             "prefix": "site.x/"}).prefix == "site.x/"


def test_long_mqtt_client_ids_stay_distinct() -> None:
    device = "d" * 60
    a = LinkOptions(name="alpha", device_id=device).client_id
    b = LinkOptions(name="beta", device_id=device).client_id
    assert len(a) <= 64 and len(b) <= 64 and a != b
    assert LinkOptions(name="up", device_id="pi7").client_id == "oxiedge-pi7-up"


@pytest.mark.parametrize("protocol", ["amqp", "mqtt"])
def test_narrowed_in_filters_stop_delivering(protocol: str, rabbit: Any, mosquitto: Any,
                                             start_server: Any, request: Any) -> None:
    """Changing --in unbinds/unsubscribes the old filters upstream (the durable queue and
    the persistent session would otherwise keep delivering them forever)."""
    dev = unique("n")
    srv = start_server("--device-id", dev)
    url = rabbit.url() if protocol == "amqp" else mosquitto.url()
    if protocol == "amqp":
        request.addfinalizer(lambda: delete_queues(rabbit, [f"oxiedge.{dev}.up1"]))

    def upstream_publish(topic: str, payload: bytes) -> None:
        if protocol == "amqp":
            rabbit.publish(f"{dev}." + topic.replace("/", "."), payload)
        else:
            mosquitto.publish(f"{dev}/{topic}", payload)

    srv.cli("uplink", "add", "up1", url, "--in", "cmd/#", "--prefix", "{device}/")
    with Local(srv.mqtt_port) as local:
        local.subscribe("#")
        wait_status(srv, "up1", connected, "connected")
        upstream_publish("cmd/a", b"1")
        assert local.messages.get(timeout=10) == ("cmd/a", b"1")
        r = srv.cli("uplink", "add", "up1", url, "--in", "ctl/#", "--prefix", "{device}/")
        assert "updated" in r.stdout
        # Ordered on one queue / one session: the marker after the old-filter message.
        deadline = time.monotonic() + 10
        while True:  # the new connection is up once a ctl message comes through
            upstream_publish("ctl/probe", b"p")
            try:
                if local.messages.get(timeout=1) == ("ctl/probe", b"p"):
                    break
            except queue.Empty:
                assert time.monotonic() < deadline, "the updated uplink never delivered"
        upstream_publish("cmd/b", b"old filter")
        upstream_publish("ctl/x", b"marker")
        got = []
        while True:
            item = local.messages.get(timeout=10)
            got.append(item)
            if item == ("ctl/x", b"marker"):
                break
        assert ("cmd/b", b"old filter") not in got, got
    assert uplink_status(srv, "up1")["state"] == "connected"
    if protocol == "mqtt":
        assert "unsubscribed 1 old filter(s)" in wait_log(srv, "uplink up1 connected to mqtt")\
            or any("unsubscribed 1 old filter(s)" in ln for ln in srv.log_lines)


def test_a_link_that_cannot_connect_names_its_url_once(start_server: Any) -> None:
    """The log line of a failed connect names the URL once (the link's error names it too,
    as ``last_error`` in the status keeps it)."""
    import socket

    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    srv = start_server()
    url = f"amqp://dev:***@127.0.0.1:{port}"
    srv.cli("uplink", "add", "dead", url.replace("***", "pw") + "/", "--out", "x/#")
    line = wait_log(srv, "uplink dead cannot connect to")
    assert line.count(url) == 1 and "cannot connect:" in line, line
    assert uplink_status(srv, "dead")["last_error"].startswith(url)

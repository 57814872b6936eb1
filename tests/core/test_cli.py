"""The CLI against a running server (admin socket) and directly on the data dir."""

from __future__ import annotations

import json
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pika

from tests.conftest import ServerProcess, run_cli


def test_ingest_routes_live_then_offline_then_after_restart(server: ServerProcess) -> None:
    res = server.cli("ingest", "add", "plant:7/temp:c/#:readings")
    assert "plant:7/temp:c/#:readings added" in res.stdout
    rows = [json.loads(x) for x in server.cli("ingest", "list", "--json").stdout.splitlines()]
    assert rows == [{"route": "plant:7/temp:c/#:readings", "filter": "plant:7/temp:c/#",
                     "collection": "readings", "source": "store"}]
    bad = server.cli("ingest", "add", "a/#/b:x", check=False)
    assert bad.returncode == 2 and "a/#/b:x" in bad.stderr
    server.stop()
    # No server: the CLI works on the data dir.
    assert "already present" in server.cli("ingest", "add", "plant:7/temp:c/#:readings").stdout
    server.cli("ingest", "add", "greenhouse/+/humidity:humidity")
    assert "removed" in server.cli("ingest", "remove", "plant:7/temp:c/#:readings").stdout
    server.restart()
    rows = [json.loads(x) for x in server.cli("ingest", "list", "--json").stdout.splitlines()]
    assert [r["route"] for r in rows] == ["greenhouse/+/humidity:humidity"]
    if server.line("MQTT listening") is not None:
        assert server.line("MQTT ingest bridge on - 1 route(s)") is not None


def test_find_collections_status_live_and_offline(server: ServerProcess) -> None:
    server.cli("ingest", "add", "s/#:docs")
    found = server.cli("find", "_config", '{"_kind": "route"}', "--json").stdout.splitlines()
    assert [json.loads(x)["collection"] for x in found] == ["docs"]
    table = server.cli("find", "_config").stdout
    assert "route" in table and "s/#" in table
    cols = [json.loads(x) for x in server.cli("collections", "--json").stdout.splitlines()]
    assert {"name": "_config", "count": 1} in cols
    status = json.loads(server.cli("status", "--json").stdout)
    assert status["store"]["durable_writes"] == "ok" and status["pid"] == server.proc.pid
    server.stop()
    offline = [json.loads(x) for x in server.cli("find", "_config", "--json", "--limit", "1")
               .stdout.splitlines()]
    assert offline[0]["filter"] == "s/#"
    assert json.loads(server.cli("status", "--json").stdout)["server"] == "not running"


def test_bad_filters_are_clear_errors(server: ServerProcess) -> None:
    for filt, needle in [("{bad", "not valid JSON"), ("[1]", "JSON object"),
                         ('{"v": {"$regex": "x"}}', "unknown operator")]:
        res = server.cli("find", "x", filt, check=False)
        assert res.returncode == 2, res
        assert needle in res.stderr
        assert "Traceback" not in res.stderr


def test_cli_without_data(tmp_path: Path) -> None:
    res = run_cli(tmp_path / "nothing", "find", "x")
    assert res.returncode == 1 and "no oxiedge data" in res.stderr


def test_user_add_list_remove(tmp_path: Path) -> None:
    data = tmp_path / "d"
    res = run_cli(data, "user", "add", "sensor1", "--password-stdin", input="pw1\n")
    assert res.returncode == 0, res.stderr
    assert json.loads(run_cli(data, "user", "list", "--json").stdout) == {"user": "sensor1",
                                                                        "tags": "none"}
    assert "pw1" not in (data / "passwd").read_text()
    assert run_cli(data, "user", "remove", "sensor1").returncode == 0
    assert run_cli(data, "user", "remove", "sensor1").returncode == 1


def test_broker_state_is_visible_offline(server: ServerProcess) -> None:
    """`find _mqtt` / `find _amqp` show queued messages with no server running too."""
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="offline-sub",
                      clean_session=False)
    sub.connect("127.0.0.1", server.mqtt_port)
    sub.loop_start()
    result, _mid = sub.subscribe("t/#", qos=1)
    assert result == mqtt.MQTT_ERR_SUCCESS
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        rows = [json.loads(x) for x in server.cli("sessions", "--json").stdout.splitlines()]
        if rows and rows[0]["subscriptions"] == 1:
            break
        time.sleep(0.05)
    sub.disconnect()
    sub.loop_stop()
    pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="offline-pub")
    pub.connect("127.0.0.1", server.mqtt_port)
    pub.loop_start()
    pub.publish("t/1", b"queued", qos=1).wait_for_publish(10)
    pub.disconnect()
    pub.loop_stop()
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.amqp_port))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("work", durable=True)
    ch.basic_publish("", "work", b"job", pika.BasicProperties(delivery_mode=2))
    conn.close()
    server.stop()
    mqtt_msgs = [json.loads(x) for x in server.cli("find", "_mqtt", '{"_kind": "msg"}', "--json")
                 .stdout.splitlines()]
    assert len(mqtt_msgs) == 1 and mqtt_msgs[0]["client"] == "offline-sub"
    amqp_msgs = [json.loads(x) for x in server.cli("find", "_amqp", '{"_kind": "qmsg"}', "--json")
                 .stdout.splitlines()]
    assert len(amqp_msgs) == 1

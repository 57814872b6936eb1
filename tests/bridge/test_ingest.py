"""The ingest bridge against a real server: document shapes, live routes, queries, SIGKILL."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable

from tests.bridge.conftest import Mqtt, eventually, find, publish_until_killed, status
from tests.conftest import ServerProcess

Start = Callable[..., ServerProcess]


def test_document_shapes_from_a_route_added_live(start_server: Start) -> None:
    server = start_server("--amqp-port", "off")
    assert server.line("MQTT ingest bridge off") is not None
    client = Mqtt(server.mqtt_port)
    try:
        client.wait_acked([client.publish("sensors/t0/temp", b"1")])  # before the route
        res = server.cli("ingest", "add", "sensors/#:sensor_readings")
        assert "sensors/#:sensor_readings added" in res.stdout
        payloads: list[tuple[str, bytes, int]] = [
            ("sensors/t1/temp", b'{"value": 21.5, "unit": "C", "_id": 7}', 1),
            ("sensors/t1/temp", b"42", 1),
            ("sensors/t2/temp", b"26.5", 0),  # QoS 0: ingested too, without waiting
            ("sensors/t2/note", "grüezi".encode(), 1),
            ("sensors/t2/raw", b"\xff\x00\xfe", 2),
            ("sensors/t2/list", b"[1, 2]", 1),
            ("sensors/t3/temp", b'{"value": 30}', 1),
            ("other/t1/temp", b'{"value": 99}', 1),  # no route
        ]
        mids = []
        for topic, payload, qos in payloads:
            mid = client.publish(topic, payload, qos)
            if qos:
                mids.append(mid)
        before = int(time.time() * 1000)
        client.wait_acked(mids)
        # The QoS 0 document was staged before the later QoS 1 ones, so their PUBACKs
        # (sent after the commit) cover it.
        docs = find(server, "sensor_readings", "--sort", "_id")
    finally:
        client.close()
    assert [d["_topic"] for d in docs] == [t for t, _p, _q in payloads[:-1]]
    assert all(before - 60_000 < d["_received_at"] <= before + 60_000 for d in docs)
    obj, num, qos0, text, raw, lst, _hot = docs
    assert {k: obj[k] for k in ("value", "unit")} == {"value": 21.5, "unit": "C"}
    assert obj["_id"] != 7 and obj["_version"] == 1  # a payload cannot choose _id
    assert num["payload"] == 42 and qos0["payload"] == 26.5
    assert text["payload"] == "grüezi" and "_payload_encoding" not in text
    assert raw["_payload_encoding"] == "base64"
    assert base64.b64decode(raw["payload"]) == b"\xff\x00\xfe"
    assert lst["payload"] == [1, 2]
    # The query of the issue, on the documents just ingested.
    res = server.cli("find", "sensor_readings", '{"value": {"$gte": 25}}', "--sort", "_received_at",
                     "--limit", "10", "--json")
    assert [json.loads(x)["_topic"] for x in res.stdout.splitlines()] == ["sensors/t3/temp"]
    table = server.cli("find", "sensor_readings", '{"value": {"$gte": 25}}').stdout
    assert "sensors/t3/temp" in table
    assert status(server)["ingest"]["ingested"] == 7
    # A lone QoS 0 publish: nothing waits for it, yet the committer was kicked.
    client = Mqtt(server.mqtt_port)
    try:
        client.publish("sensors/t4/temp", b'{"value": -3}', 0)
        eventually(lambda: find(server, "sensor_readings", '{"_topic": "sensors/t4/temp"}'),
                   what="the QoS 0 document")
    finally:
        client.close()
    server.restart()
    assert server.line("MQTT ingest bridge on - 1 route(s)") is not None


def test_every_acknowledged_reading_is_a_document_after_sigkill(start_server: Start) -> None:
    server = start_server("--amqp-port", "off", "--ingest", "plant/+/temp:readings")
    acked = publish_until_killed(server, "plant/p1/temp", 4000)
    server.start()
    seqs = {d["seq"] for d in find(server, "readings")}
    missing = sorted(set(acked.values()) - seqs)
    assert not missing, f"{len(missing)} acknowledged readings lost, e.g. {missing[:5]}"


def test_retention_max_docs_and_max_age(start_server: Start) -> None:
    server = start_server("--amqp-port", "off")
    res = server.cli("ingest", "add", "log/#:log", "--max-docs", "50")
    assert "(max_docs=50)" in res.stdout
    server.cli("ingest", "add", "tick/#:ticks", "--max-age", "1s")
    bad = server.cli("ingest", "add", "x/#:x", "--max-age", "soon", check=False)
    assert bad.returncode == 2 and "invalid duration" in bad.stderr
    client = Mqtt(server.mqtt_port)
    try:
        client.wait_acked([client.publish("log/a", json.dumps({"n": i})) for i in range(300)])
        client.wait_acked([client.publish("tick/a", json.dumps({"n": i})) for i in range(20)])
    finally:
        client.close()
    eventually(lambda: status(server)["ingest"]["retention"]["log"]["deleted"] == 250,
               what="max_docs retention")
    assert [d["n"] for d in find(server, "log", "--sort", "_id")] == list(range(250, 300))
    st = eventually(lambda: (s := status(server))["ingest"]["retention"]["ticks"]["deleted"] == 20
                    and s, what="max_age retention")
    assert st["ingest"]["retention_deleted"] == 270
    assert st["ingest"]["retention"]["ticks"]["max_age"] == "1s"
    assert find(server, "ticks") == []
    rows = [json.loads(x) for x in server.cli("ingest", "list", "--json").stdout.splitlines()]
    assert {r["route"]: r.get("max_docs") for r in rows} == {"log/#:log": 50, "tick/#:ticks": None}
    # Tightening a route's retention is an update of the same route.
    assert "updated" in server.cli("ingest", "add", "log/#:log", "--max-docs", "10").stdout
    eventually(lambda: len(find(server, "log")) == 10, what="tightened max_docs")


def test_index_add_live_and_offline(start_server: Start) -> None:
    server = start_server("--amqp-port", "off", "--ingest", "sensors/#:sensor_readings")
    client = Mqtt(server.mqtt_port)
    try:
        mids = [client.publish(f"sensors/t{i % 3}/temp", json.dumps({"value": i % 40}))
                for i in range(400)]
        client.wait_acked(mids)
        query = ['{"value": {"$gte": 25, "$lt": 27}}', "--sort", "_received_at", "--limit", "10"]
        scanned = find(server, "sensor_readings", *query)
        assert "added" in server.cli("index", "add", "sensor_readings", "value").stdout
        assert find(server, "sensor_readings", *query) == scanned
        assert len(scanned) == 10 and {d["value"] for d in scanned} == {25, 26}
        # Through the index, the server decodes only the documents in range.
        read_before = status(server)["ingest"]["documents_read"]
        in_range = find(server, "sensor_readings", '{"value": {"$gte": 25, "$lte": 26}}')
        assert len(in_range) == 20  # 400 readings of i % 40
        assert status(server)["ingest"]["documents_read"] - read_before == 20
        # Maintained on insert: new documents are found through the index.
        client.wait_acked([client.publish("sensors/t9/temp", b'{"value": 1000}')])
        assert [d["_topic"] for d in find(server, "sensor_readings", '{"value": 1000}')] == \
            ["sensors/t9/temp"]
    finally:
        client.close()
    st = status(server)["ingest"]
    assert st["indexes"] == 1 and st["finds_by_index"] >= 2
    rows = [json.loads(x) for x in server.cli("index", "list", "--json").stdout.splitlines()]
    assert rows == [{"collection": "sensor_readings", "field": "value", "state": "ready", "id": 1}]
    server.stop()
    # Offline, on the data dir: add another index, query, remove.
    assert "added" in server.cli("index", "add", "sensor_readings", "_topic").stdout
    topic_rows = find(server, "sensor_readings", '{"_topic": "sensors/t9/temp"}')
    assert [d["value"] for d in topic_rows] == [1000]
    assert "removed" in server.cli("index", "remove", "sensor_readings", "_topic").stdout
    gone = server.cli("index", "remove", "sensor_readings", "_topic", check=False)
    assert gone.returncode == 1 and "no index" in gone.stderr

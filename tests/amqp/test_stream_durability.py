"""Stream queues across SIGKILL and restarts, and their retention (real server, pika)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pika

from oxiedge.amqp import codec, spec
from tests.amqp.conftest import cli_rows, connect
from tests.amqp.rawclient import RawClient
from tests.amqp.test_streams import STREAM, declare, offsets, publish, take


def stream_row(srv: Any, name: str) -> dict[str, Any]:
    return next(r for r in cli_rows(srv, "queues") if r["name"] == name)


def test_sigkill_keeps_every_confirmed_message_in_order(start_server: Any) -> None:
    """A pipelined confirming publisher (raw frames, 64 in flight) is cut by SIGKILL; after
    the restart every confirmed message is in the stream, in order, at the offset a
    consumer saw before the kill; new messages continue after them."""
    srv = start_server()
    raw = RawClient(srv.amqp_port)
    raw.handshake()
    raw.open_channel(1)
    raw.call(1, spec.ConfirmSelect(), spec.ConfirmSelectOk)
    raw.call(1, spec.QueueDeclare(queue="log", durable=True, arguments=STREAM),
             spec.QueueDeclareOk)
    props = spec.BasicProperties(delivery_mode=2).encode()
    confirmed = sent = 0
    killed = threading.Event()
    seen_before: list[tuple[int, bytes, dict[str, Any]]] = []

    def frame(i: int) -> bytes:
        return codec.encode_content(1, spec.BasicPublish(routing_key="log"), props,
                                    b"%08d" % i, 0)

    try:
        while not killed.is_set():
            while sent - confirmed < 64:
                raw.send(frame(sent))
                sent += 1
            cmd = raw.recv_command(timeout=5)
            assert cmd is not None and isinstance(cmd.method, spec.BasicAck)
            confirmed = cmd.method.delivery_tag
            if confirmed >= 1000 and not seen_before:
                seen_before = take(connect(srv), "log", 200, "first", prefetch=100)
            if confirmed >= 3000 and not killed.is_set():
                srv.kill()
                killed.set()
    except (OSError, AssertionError):
        assert killed.is_set()
    raw.close()
    srv.start()
    row = stream_row(srv, "log")
    assert row["next_offset"] >= confirmed  # recovery read the segment records
    conn = connect(srv)
    after = take(conn, "log", row["next_offset"], "first", prefetch=500)
    assert offsets(after) == list(range(row["next_offset"]))
    assert [g[1] for g in after[:confirmed]] == [b"%08d" % i for i in range(confirmed)]
    assert [(o, b) for o, b, _h in seen_before] == [(o, b) for o, b, _h in after[:200]]
    ch = conn.channel()
    ch.confirm_delivery()
    publish(ch, "log", 2, 10_000)
    tail = take(conn, "log", 2, row["next_offset"])
    assert offsets(tail) == [row["next_offset"], row["next_offset"] + 1]
    assert [g[1] for g in tail] == [b"m10000", b"m10001"]


def test_restart_keeps_offsets_and_a_consumer_resumes(start_server: Any) -> None:
    srv = start_server()
    conn = connect(srv)
    ch = conn.channel()
    ch.confirm_delivery()
    declare(ch, "resume")
    publish(ch, "resume", 20)
    first = take(conn, "resume", 12, "first")
    conn.close()
    srv.restart()
    conn = connect(srv)
    rest = take(conn, "resume", 8, first[-1][0] + 1)
    assert [(o, b) for o, b, _h in rest] == [(i, b"m%d" % i) for i in range(12, 20)]
    assert "recovered 1 durable queues" in (srv.line("AMQP listening on") or "")
    srv.stop()
    row = stream_row(srv, "resume")  # offline, from the data directory
    assert (row["type"], row["ready"], row["next_offset"]) == ("stream", 20, 20)


def test_retention_by_bytes_removes_whole_segments(start_server: Any) -> None:
    srv = start_server()
    conn = connect(srv)
    ch = conn.channel()
    ch.confirm_delivery()
    # records of ~130 bytes; segments of ~8 records; keep about 3 segments
    declare(ch, "capped", **{"x-stream-max-segment-size-bytes": 1000,
                             "x-max-length-bytes": 3000})
    for i in range(200):
        ch.basic_publish("", "capped", b"x" * 64 + b"%04d" % i,
                         pika.BasicProperties(delivery_mode=2))
    row = stream_row(srv, "capped")
    assert row["next_offset"] == 200
    assert 0 < row["first_offset"] < 200 and row["bytes"] <= 3000 + 1000
    assert row["segments"] <= 4 and row["dropped"] == row["first_offset"]
    got = take(conn, "capped", 200 - row["first_offset"], "first")
    assert offsets(got) == list(range(row["first_offset"], 200))
    assert got[-1][1].endswith(b"0199")
    # the next start reads the segment records: the same figures, nothing more
    srv.restart()
    again = stream_row(srv, "capped")
    assert (again["first_offset"], again["next_offset"]) == (row["first_offset"], 200)
    assert offsets(take(connect(srv), "capped", 1, 0)) == [row["first_offset"]]


def test_retention_by_age(start_server: Any) -> None:
    srv = start_server()
    conn = connect(srv)
    ch = conn.channel()
    ch.confirm_delivery()
    declare(ch, "aged", **{"x-stream-max-segment-size-bytes": 500, "x-max-age": "1s"})
    publish(ch, "aged", 30)
    time.sleep(2.2)  # (the age is a second: let the first records pass it)
    publish(ch, "aged", 30, 30)
    row = stream_row(srv, "aged")
    assert 20 < row["first_offset"] <= 30 and row["next_offset"] == 60
    assert take(conn, "aged", 1, "first")[0][0] == row["first_offset"]


def test_mqtt_readings_feed_a_stream_through_amq_topic(start_server: Any) -> None:
    """The bridge feeds a stream like any queue bound to amq.topic: every PUBACKed QoS 1
    reading is in the stream after a SIGKILL, in publish order."""
    import json

    from tests.bridge.conftest import Mqtt

    srv = start_server()
    conn = connect(srv)
    ch = conn.channel()
    declare(ch, "readings")
    ch.queue_bind("readings", "amq.topic", "sensors.#")
    conn.close()
    sensor = Mqtt(srv.mqtt_port, "sensor-s")
    try:
        sensor.wait_acked([sensor.publish("sensors/t1/temp", json.dumps({"seq": i}), 1)
                           for i in range(50)])
    finally:
        sensor.close()
    srv.kill()
    srv.start()
    got = take(connect(srv), "readings", 50, "first")
    assert offsets(got) == list(range(50))
    assert [json.loads(g[1])["seq"] for g in got] == list(range(50))


def test_management_api_and_metrics_show_streams(start_server: Any) -> None:
    from tests.http.conftest import HttpClient

    srv = start_server("--http-port", "0")
    conn = connect(srv)
    ch = conn.channel()
    ch.confirm_delivery()
    declare(ch, "shown", **{"x-max-age": "6h"})
    publish(ch, "shown", 4)
    http = HttpClient(srv.http_port)
    try:
        q = http.get("/api/queues/%2F/shown").json()
        assert q["type"] == "stream" and q["messages"] == 4 and q["durable"]
        assert q["arguments"]["x-max-age"] == "6h"
        metrics = http.get("/metrics").body.decode()
    finally:
        http.close()
    assert "oxiedge_amqp_streams 1" in metrics
    assert "oxiedge_amqp_stream_messages 4" in metrics
    assert "oxiedge_amqp_stream_appended_total 4" in metrics


def test_an_uplinks_commands_and_ingest_share_a_stream(start_server: Any, tmp_path: Any) -> None:
    """What an uplink brings down (--in) reaches a stream bound to amq.topic, as any queue;
    an ingest route on the same topics stores the same messages as documents."""
    upstream = start_server(data=tmp_path / "upstream")
    device = start_server(data=tmp_path / "device")
    conn = connect(device)
    ch = conn.channel()
    declare(ch, "commands")
    ch.queue_bind("commands", "amq.topic", "cmd.#")
    device.cli("ingest", "add", "cmd/#:cmds")
    device.cli("uplink", "add", "central", f"mqtt://127.0.0.1:{upstream.mqtt_port}",
               "--in", "cmd/#")
    deadline = time.monotonic() + 20
    while '"state": "connected"' not in device.cli("uplink", "status", "--json").stdout:
        assert time.monotonic() < deadline, device.cli("uplink", "status").stdout
        time.sleep(0.2)
    for i in range(3):
        upstream.cli("pub", "-t", f"cmd/dev/{i}", "-m", f"c{i}", "-q", "1")
    got = take(conn, "commands", 3, "first")
    assert [(o, b) for o, b, _h in got] == [(0, b"c0"), (1, b"c1"), (2, b"c2")]
    docs = device.cli("find", "cmds", "{}", "--json").stdout
    assert all(f'"c{i}"' in docs for i in range(3)), docs

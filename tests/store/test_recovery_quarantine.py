"""Recovery that never crash-loops: a data dir with a corrupted record of every kind starts.

A real server builds real state (MQTT sessions, subscriptions, queued messages, retained
messages; AMQP durable exchanges, queues, bindings, persistent messages; documents, an
index, ingest routes, an uplink with an outbox); then, offline, one record of each kind is
overwritten with bytes this version cannot use (garbage, truncation, an unknown record
version, a value of the wrong type), and a column family this version does not know is
added. The restarted server must start, log each quarantined record with its key, report
them in ``oxiedge status``, serve everything else, and start again without meeting them.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

import pika
import pytest
from rocksdict import Options, Rdict

from oxiedge.admin.client import call
from oxiedge.mqtt import persist as mqtt_persist
from oxiedge.mqtt.codec import encode
from oxiedge.mqtt.packets import Puback, Publish
from oxiedge.store import FORMAT_VERSION, Store
from oxiedge.store import encoding as enc
from oxiedge.store.rocks import existing_families
from tests.conftest import run_cli
from tests.mqtt.rawclient import RawSession

QUEUED = 5
READ_BACK = 0  # index in ``corrupt``'s list of the message record met only on read-back


def amqp(port: int | None) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))


def admin(srv: Any, op: str, **args: Any) -> Any:
    """The admin API the CLI uses (in-process: no interpreter start per call)."""
    return call(srv.admin_socket, op, args)


def status(srv: Any) -> dict[str, Any]:
    return dict(admin(srv, "status"))


def build_state(srv: Any) -> None:
    """Real records of every kind, made through the protocols and the CLI."""
    for client in ("good", "lost-session", "bad-sub"):
        s = RawSession(srv.mqtt_port)
        s.connect(client, clean=False)
        s.subscribe(1, ("q/#", 1))
        s.disconnect()
    pub = RawSession(srv.mqtt_port)
    pub.connect("writer")
    for i in range(QUEUED):
        pub.publish("q/m", b"m%d" % i, 1, pid=i + 1)
    pub.publish("state/good", b"on", 1, pid=90, retain=True)
    pub.publish("state/bad", b"off", 1, pid=91, retain=True)
    pub.disconnect()

    conn = amqp(srv.amqp_port)
    ch = conn.channel()
    ch.exchange_declare("x-good", "direct", durable=True)
    ch.exchange_declare("x-bad", "fanout", durable=True)
    for q in ("q-good", "q-bad", "q-unbound"):
        ch.queue_declare(q, durable=True)
    ch.queue_bind("q-good", "x-good", "k")
    ch.queue_bind("q-unbound", "x-good", "u")
    ch.confirm_delivery()
    for q in ("q-good", "q-bad"):
        for i in range(QUEUED):
            ch.basic_publish("", q, b"%s-%d" % (q.encode(), i),
                             pika.BasicProperties(delivery_mode=2))
    conn.close()

    admin(srv, "ingest.add", route="sensors/#:readings")
    admin(srv, "ingest.add", route="other/#:other")
    srv.cli("uplink", "add", "up1", "mqtt://127.0.0.1:9", "--out", "fwd/#")
    pub = RawSession(srv.mqtt_port)
    pub.connect("writer2")
    for i in range(4):
        pub.publish("sensors/t", json.dumps({"i": i}).encode(), 1, pid=i + 1)
        pub.publish("other/t", json.dumps({"i": i}).encode(), 1, pid=i + 11)
        pub.publish("fwd/t", b"f%d" % i, 1, pid=i + 21)
    pub.disconnect()


def corrupt(db: Path) -> list[tuple[str, bytes]]:
    """Overwrite one record of each kind; returns ``(column family, key)`` of each."""
    store = Store.open(db)
    bad: list[tuple[str, bytes]] = []

    def put(cf: str, key: bytes, value: bytes) -> None:
        store.stage_put(cf, key, value)
        bad.append((cf, key))

    owners = {}
    for key, value in store.iter_raw("mqtt", mqtt_persist.SESSION):
        owners[key[1:].decode()] = mqtt_persist.decode_session(value)[0]
    good = mqtt_persist.owner_bytes(owners["good"])
    # session: truncated; its queued messages must go with it (never inherited)
    put("mqtt", mqtt_persist.session_key("lost-session"), b"\x00\x01")
    lost = mqtt_persist.owner_bytes(owners["lost-session"])
    bad += [("mqtt", k) for k, _ in store.iter_raw("mqtt", mqtt_persist.MSG + lost)]
    bad += [("mqtt", k) for k, _ in store.iter_raw("mqtt", mqtt_persist.count_key(lost))]
    # sub: a subscription no client could have made
    put("mqtt", mqtt_persist.session_key("bad-sub"),
        mqtt_persist.encode_session(owners["bad-sub"], {"a/#/b": 1}))
    bad_sub = mqtt_persist.owner_bytes(owners["bad-sub"])
    bad += [("mqtt", k) for k, _ in store.iter_raw("mqtt", mqtt_persist.MSG + bad_sub)]
    bad += [("mqtt", k) for k, _ in store.iter_raw("mqtt", mqtt_persist.count_key(bad_sub))]
    # msg: the first queued message of "good", QoS 3 and a topic length past the end (met
    # when the queue is read back, not at start-up: a restart does not read the backlog)
    first_msg = next(k for k, _ in store.iter_raw("mqtt", mqtt_persist.MSG + good))
    store.stage_put("mqtt", first_msg, b"\x03\xff\xffab")
    bad.insert(READ_BACK, ("mqtt", first_msg))
    # rel / rx2: keys of the wrong length, packet id 0
    put("mqtt", mqtt_persist.rel_key(good, 7) + b"?", b"")
    put("mqtt", mqtt_persist.rx2_key(good, 0), b"")
    # retained: empty value; a topic that is not UTF-8
    put("mqtt", mqtt_persist.retain_key("state/bad"), b"")
    put("mqtt", mqtt_persist.RETAIN + b"\xff\xfe", b"\x01x")

    docs = {d["name"]: d for d in store.find("_amqp") if "name" in d}
    coll_amqp = store._collection("_amqp", create=False)
    assert coll_amqp is not None

    def put_doc(coll_cid: int, doc_id: int, value: bytes) -> None:
        put("docs", enc.doc_key(coll_cid, doc_id), value)

    put_doc(coll_amqp.cid, docs["x-bad"]["_id"],
            json.dumps({"_kind": "exchange", "name": "x-bad", "type": "nonsense"}).encode())
    qbad = docs["q-bad"]
    put_doc(coll_amqp.cid, qbad["_id"], b"\x00not json")
    bad += [("amqp", k) for k, _ in store.iter_raw("amqp", b"m" + struct.pack(">Q", qbad["qid"]))]
    bind = next(d for d in store.find("_amqp", {"_kind": "bind", "routing_key": "u"}))
    put_doc(coll_amqp.cid, bind["_id"],
            json.dumps({"_kind": "bind", "exchange": 5, "queue": "q-unbound"}).encode())
    qgood = docs["q-good"]["qid"]
    first_qmsg = next(k for k, _ in store.iter_raw("amqp", b"m" + struct.pack(">Q", qgood)))
    put("amqp", first_qmsg, b"\x07 from a newer version")

    readings = store._collection("readings", create=False)
    assert readings is not None
    # A user document is decoded when read, not at start-up: quarantined on first read.
    store.stage_put("docs", enc.doc_key(readings.cid, 1), b"{\"i\": 0,")  # truncated JSON
    lazy = ("docs", enc.doc_key(readings.cid, 1))
    other = store._collection("other", create=False)
    assert other is not None
    put("meta", enc.counters_key(other.cid), b"\x01")
    put("meta", enc.catalog_key("ghost"), b"garbage")
    put("meta", b"x" + struct.pack(">I", 99), b"{\"collection\": 1}")
    config = store._collection("_config", create=False)
    assert config is not None
    route = next(d for d in store.find("_config", {"_kind": "route", "collection": "other"}))
    put_doc(config.cid, route["_id"], json.dumps(
        {"_kind": "route", "filter": "a/#/b", "collection": "other"}).encode())
    put_doc(config.cid, 10_000, b"\xff\xfe uplink definition")
    store._collection("_config", create=False).next_id = 10_001  # type: ignore[union-attr]
    outbox = [k for k, _ in store.iter_raw("uplink", b"oup1\x00")]
    assert len(outbox) == 4
    # An outbox record is a queue log's (met when its link reads it back, which never
    # happens here: the upstream is down; tests/uplink/test_outbox.py has that case).
    store.stage_put("uplink", outbox[0], b"\x00\x01")
    put("uplink", b"nup1", b"\x01\x02\x03")  # a seq mark of the layout before the log
    store.commit_blocking()
    store.close()

    # A column family written by a newer version: must be opened and left alone.
    families = {name: Options(raw_mode=True) for name in existing_families(db)
                if name != "default"}
    families["from_the_future"] = Options(raw_mode=True)
    opts = Options(raw_mode=True)
    opts.create_missing_column_families(True)
    rdb = Rdict(str(db), opts, column_families=families)
    rdb.get_column_family("from_the_future")[b"k"] = b"v"
    rdb.close()
    return [*bad, lazy]  # the last one: quarantined when first read


def test_corrupt_records_of_every_kind_are_quarantined_and_the_rest_served(
        start_server: Any, tmp_path: Path) -> None:
    srv = start_server()
    build_state(srv)
    assert srv.stop() == 0
    bad = corrupt(srv.data / "db")

    again = start_server(data=srv.data)
    lines = [ln for ln in again.log_lines if ln.startswith("recovery: quarantined ")]
    read_back = bad[READ_BACK]  # the "good" session's message: met when it is read back
    for cf, key in bad[:-1]:
        if (cf, key) == read_back:
            continue
        assert any(f"quarantined {cf} record {key!r}" in ln for ln in lines), (
            cf, key, "\n".join(again.log_lines))
    assert again.line("store: column family 'from_the_future' is not used") is not None
    summary = again.line("recovery: ")
    assert summary is not None
    st = status(again)["store"]
    quarantine = st["quarantine"]
    assert quarantine["records"] == len(set(bad)) - 2 == quarantine["this_run"], quarantine
    assert quarantine["unknown_families"] == ["from_the_future"]
    assert quarantine["latest"] and st["format_version"] == FORMAT_VERSION

    # MQTT: "good" has its other queued messages; the quarantined sessions are gone and a
    # new session under that name does not inherit their messages.
    sub = RawSession(again.mqtt_port)
    sub.connect("good", clean=False, expect=b"\x20\x02\x01\x00")
    got = []
    for _ in range(QUEUED - 1):
        msg = sub.next(timeout=10)
        assert isinstance(msg, Publish), msg
        sub.send(encode(Puback(msg.packet_id or 0)))
        got.append(msg.payload)
    assert got == [b"m%d" % i for i in range(1, QUEUED)]
    sub.disconnect()
    assert again.line(f"recovery: quarantined mqtt record {read_back[1]!r}") is not None
    fresh = RawSession(again.mqtt_port)
    fresh.connect("lost-session", clean=False)  # session present = 0
    fresh.subscribe(1, ("state/#", 1))
    retained = fresh.next(timeout=10)
    assert isinstance(retained, Publish) and retained.topic == "state/good", retained
    fresh.send(encode(Puback(retained.packet_id or 0)))
    with pytest.raises(TimeoutError):
        fresh.next(timeout=1)  # nothing inherited, no state/bad
    fresh.disconnect()

    # AMQP: q-good serves its other messages, x-good still routes into it; q-bad and x-bad
    # are gone (quarantined), the broken binding is gone.
    conn = amqp(again.amqp_port)
    ch = conn.channel()
    bodies = []
    while (m := ch.basic_get("q-good", auto_ack=True))[0] is not None:
        bodies.append(m[2])
    assert bodies == [b"q-good-%d" % i for i in range(1, QUEUED)]
    ch.basic_publish("x-good", "k", b"routed")
    time.sleep(0.2)
    assert ch.basic_get("q-good", auto_ack=True)[2] == b"routed"
    ch.basic_publish("x-good", "u", b"unbound")
    time.sleep(0.2)
    assert ch.basic_get("q-unbound", auto_ack=True)[0] is None
    conn.close()
    ch = amqp(again.amqp_port).channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        ch.queue_declare("q-bad", passive=True)

    # Documents, counters, routes: the good ingest route still ingests; the broken one not.
    readings = again.cli("find", "readings", "--json").stdout.splitlines()
    assert [json.loads(r)["i"] for r in readings] == [1, 2, 3]
    lazy = bad.pop()  # the document quarantined by that read
    assert any(f"quarantined docs record {lazy[1]!r}" in ln and "readings document 1:" in ln
               for ln in again.log_lines), again.log_lines[-5:]
    bad.append(lazy)
    counts = {c["name"]: c["count"] for c in admin(again, "collections")}
    assert counts["other"] == 4 and counts["readings"] == 3  # recounted; one quarantined
    pub = RawSession(again.mqtt_port)
    pub.connect("writer3")
    pub.publish("sensors/t", b'{"i": 4}', 1, pid=1)
    pub.disconnect()
    readings = admin(again, "find", collection="readings")
    assert [r["i"] for r in readings] == [1, 2, 3, 4]
    routes = [r["route"] for r in admin(again, "ingest.list")]
    assert routes == ["sensors/#:readings"], routes
    assert "up1" in json.dumps(admin(again, "uplink.status"))
    assert again.stop() == 0

    # Start-up again: nothing new is met; the quarantine is still listed; the unknown
    # family still holds its record.
    third = start_server(data=srv.data)
    assert third.line("recovery: quarantined") is None, third.log_lines
    q3 = status(third)["store"]["quarantine"]
    assert q3["records"] == len(set(bad)) and q3["this_run"] == 0
    assert third.stop() == 0
    rdb = Rdict(str(srv.data / "db"), Options(raw_mode=True), column_families={
        name: Options(raw_mode=True) for name in existing_families(srv.data / "db")
        if name != "default"})
    assert rdb.get_column_family("from_the_future")[b"k"] == b"v"
    rdb.close()
    # Offline, the CLI shows the same count.
    offline = json.loads(run_cli(srv.data, "status", "--json").stdout)
    assert offline["store"]["quarantine"]["records"] == len(set(bad))


def test_newer_format_is_refused_and_older_is_migrated(start_server: Any,
                                                       tmp_path: Path) -> None:
    data = tmp_path / "data"
    db = data / "db"
    store = Store.open(db)  # a fresh data dir carries the current version
    assert store.get_raw("meta", b"v") == struct.pack(">I", FORMAT_VERSION)
    store.stage_put("meta", b"v", struct.pack(">I", FORMAT_VERSION + 1))
    store.commit_blocking()
    store.close()
    refused = start_server("--amqp-port", "off", data=data, expect_ready=False)
    assert refused.proc.wait(30) == 2
    text = "\n".join(refused.log_lines)
    assert f"format version {FORMAT_VERSION + 1}" in text and "newer oxiedge" in text, text
    assert "Traceback" not in text
    with pytest.raises(Exception, match="newer oxiedge"):
        Store.open(db)
    # Today's data dirs have no marker (format 0): migrated at start-up.
    rdb = Rdict(str(db), Options(raw_mode=True), column_families={
        name: Options(raw_mode=True) for name in existing_families(db) if name != "default"})
    del rdb.get_column_family("meta")[b"v"]
    rdb.drop_column_family("quarantine")
    rdb.close()
    assert run_cli(data, "status", "--json").returncode == 0  # read-only: no change
    migrated = start_server("--amqp-port", "off", data=data)
    assert migrated.stop() == 0
    store = Store.open(db, read_only=True)
    assert store.get_raw("meta", b"v") == struct.pack(">I", FORMAT_VERSION)
    assert store.has_family("quarantine")
    store.close()

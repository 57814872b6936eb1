"""SIGKILL the real server: whatever was acknowledged survives, exactly once, in order."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from oxiedge.mqtt.codec import encode
from oxiedge.mqtt.packets import Puback, Pubcomp, Publish, Pubrec, Pubrel
from tests.conftest import ServerProcess

from .conftest import cli_rows, wait_for
from .rawclient import RawSession

Start = Callable[..., ServerProcess]


def find(srv: ServerProcess, flt: dict[str, Any]) -> list[dict[str, Any]]:
    """``oxiedge find _mqtt FILTER --json`` (live through the admin socket, or offline)."""
    return cli_rows(srv, "find", "_mqtt", json.dumps(flt))


def port(srv: ServerProcess) -> int:
    assert srv.mqtt_port is not None
    return srv.mqtt_port


def test_sigkill_offline_subscriber_gets_every_acked_message_once_in_order(
    start_mqtt: Start,
) -> None:
    srv = start_mqtt()
    sub = RawSession(port(srv))
    sub.connect("dur-sub", clean=False)
    assert sub.subscribe(1, ("d/#", 2)) == (2,)
    sub.disconnect()
    pub = RawSession(port(srv))
    pub.connect("dur-pub")
    sent = []
    for i in range(60):
        qos = 1 + i % 2
        payload = f"msg-{i}".encode()
        pub.publish("d/x", payload, qos, pid=i + 1)  # returns once PUBACK/PUBCOMP arrived
        sent.append((payload, qos))
    pub.publish("d/same", b"twin", 1, pid=100)  # identical payloads stay two messages
    pub.publish("d/same", b"twin", 1, pid=101)
    sent += [(b"twin", 1), (b"twin", 1)]
    pub.publish("d/ret", b"retained-v", 1, pid=200, retain=True)
    sent.append((b"retained-v", 1))
    srv.kill()

    srv.start()
    assert srv.line(f"MQTT persistence on - recovered 1 sessions, {len(sent)} pending messages"), (
        srv.log_lines
    )
    sub = RawSession(port(srv))
    assert sub.connect("dur-sub", clean=False, expect=None) == b"\x20\x02\x01\x00"  # present
    got = [sub.receive() for _ in range(len(sent))]
    assert [(p.payload, p.qos) for p in got] == sent
    # Re-delivered after a crash: they may have been sent before, so DUP is set.
    assert all(p.dup for p in got)
    assert all(not p.retain for p in got)
    sub.ping()  # nothing else was queued
    sub.disconnect()
    # The retained value survived too.
    late = RawSession(port(srv))
    late.connect("late")
    late.subscribe(1, ("d/ret", 1))
    r = late.receive()
    assert (r.topic, r.payload, r.retain) == ("d/ret", b"retained-v", True)
    late.disconnect()
    # The acks deleted every message record (by (client, seq)): nothing left on disk.
    assert [d["client"] for d in find(srv, {"_kind": "session"})] == ["dur-sub"]
    wait_for(lambda: find(srv, {"_kind": "msg"}) == [])
    assert [d["topic"] for d in find(srv, {"_kind": "retain"})] == ["d/ret"]
    assert srv.stop() == 0
    # Offline listings read the same records from the data dir.
    rows = cli_rows(srv, "sessions")
    assert [(r["client"], r["queued"], r["inflight"]) for r in rows] == [("dur-sub", 0, 0)]
    rows = cli_rows(srv, "retained")
    assert rows == [{"topic": "d/ret", "qos": 1, "bytes": 10}]


def test_sigkill_inflight_messages_are_resent_with_dup(start_mqtt: Start) -> None:
    srv = start_mqtt()
    sub = RawSession(port(srv))
    sub.connect("inflight", clean=False)
    sub.subscribe(1, ("f/#", 1))
    pub = RawSession(port(srv))
    pub.connect("pub")
    for i in range(5):
        pub.publish("f/x", str(i).encode(), 1, pid=i + 1)
    first = [sub.receive(ack=False) for _ in range(5)]
    assert [p.dup for p in first] == [False] * 5
    srv.kill()
    srv.start()
    sub = RawSession(port(srv))
    sub.connect("inflight", clean=False, expect=None)
    again = [sub.receive() for _ in range(5)]
    assert [p.payload for p in again] == [str(i).encode() for i in range(5)]
    assert [p.packet_id for p in again] == [p.packet_id for p in first]  # MQTT-4.4.0-1
    assert all(p.dup for p in again)


def test_sigkill_inbound_qos2_is_not_duplicated(start_mqtt: Start) -> None:
    """PUBREC means the message and its packet id are on disk: after a crash the
    client's re-sent PUBLISH (DUP) is recognised and not routed twice (MQTT-4.3.3-2)."""
    srv = start_mqtt()
    sub = RawSession(port(srv))
    sub.connect("q2-sub", clean=False)
    sub.subscribe(1, ("q2/#", 1))
    sub.disconnect()
    pub = RawSession(port(srv))
    pub.connect("q2-pub", clean=False)
    pub.send(b"\x34\x0b\x00\x04q2/a\x00\x2aone")  # QoS 2 PUBLISH, packet id 42
    assert pub.recv_packet() == b"\x50\x02\x00\x2a"  # PUBREC: durable now
    srv.kill()
    srv.start()
    assert find(srv, {"_kind": "rx2"}) == [
        {"_kind": "rx2", "client": "q2-pub", "packet_id": 42}
    ]  # fmt: skip
    pub = RawSession(port(srv))
    pub.connect("q2-pub", clean=False, expect=None)
    pub.send(b"\x3c\x0b\x00\x04q2/a\x00\x2aone")  # the client re-sends with DUP
    assert pub.recv_packet() == b"\x50\x02\x00\x2a"
    pub.send(b"\x62\x02\x00\x2a")
    assert pub.recv_packet() == b"\x70\x02\x00\x2a"  # PUBCOMP
    sub = RawSession(port(srv))
    sub.connect("q2-sub", clean=False, expect=None)
    assert sub.receive().payload == b"one"
    sub.ping()  # exactly once
    wait_for(lambda: find(srv, {"_kind": "rx2"}) == [])


def test_sigkill_outbound_pubrel_obligation_survives(start_mqtt: Start) -> None:
    srv = start_mqtt()
    sub = RawSession(port(srv))
    sub.connect("rel-sub", clean=False)
    sub.subscribe(1, ("r/#", 2))
    pub = RawSession(port(srv))
    pub.connect("pub")
    pub.publish("r/x", b"two", 2, pid=9)
    p = sub.receive(ack=False)
    sub.send(b"\x50\x02" + (p.packet_id or 0).to_bytes(2, "big"))  # PUBREC
    assert sub.recv_packet() == b"\x62\x02" + (p.packet_id or 0).to_bytes(2, "big")
    wait_for(lambda: len(find(srv, {"_kind": "rel"})) == 1)  # the obligation hit the disk
    srv.kill()
    srv.start()
    sub = RawSession(port(srv))
    sub.connect("rel-sub", clean=False, expect=None)
    # MQTT-4.4.0-1: the PUBREL is re-sent, not the PUBLISH.
    assert sub.recv_packet() == b"\x62\x02" + (p.packet_id or 0).to_bytes(2, "big")
    sub.send(b"\x70\x02" + (p.packet_id or 0).to_bytes(2, "big"))
    sub.send(b"\xc0\x00")
    assert sub.recv_packet() == b"\xd0\x00"
    wait_for(lambda: find(srv, {"_kind": "rel"}) == [])


def test_recovery_loads_at_most_the_bound(start_mqtt: Start, tmp_path: Any) -> None:
    srv = start_mqtt()
    sub = RawSession(port(srv))
    sub.connect("bound", clean=False)
    sub.subscribe(1, ("b/#", 1))
    sub.disconnect()
    pub = RawSession(port(srv))
    pub.connect("pub")
    for i in range(20):
        pub.publish("b/x", str(i).encode(), 1, pid=i + 1)
    srv.kill()
    # Restart with a smaller bound: only the newest 8 are loaded, the rest deleted on disk.
    srv.args = (*srv.args, "--mqtt-queue-limit", "8")
    srv.start()
    assert srv.line("MQTT persistence on - recovered 1 sessions, 8 pending messages")
    assert [d["seq"] for d in find(srv, {"_kind": "msg"})] == list(range(12, 20))
    sub = RawSession(port(srv))
    sub.connect("bound", clean=False, expect=None)
    assert [sub.receive().payload for _ in range(8)] == [str(i).encode() for i in range(12, 20)]


def test_sigkill_under_load_loses_no_acknowledged_message(start_mqtt: Start) -> None:
    """Pipelined QoS 1 publishing while the server is SIGKILLed at an arbitrary moment:
    every message whose PUBACK arrived is delivered after the restart, once, in order."""
    srv = start_mqtt()
    sub = RawSession(port(srv))
    sub.connect("load-sub", clean=False)
    sub.subscribe(1, ("load/#", 1))
    sub.disconnect()
    pub = RawSession(port(srv))
    pub.connect("load-pub")
    acked: list[int] = []
    window = 64
    next_no = 1  # message numbers, carried in the payload's first 4 bytes
    try:
        while True:
            numbers = range(next_no, next_no + window)
            next_no += window
            pub.send(b"".join(
                encode(Publish("load/x", no.to_bytes(4, "big") + b"." * 60, 1, packet_id=i + 1))
                for i, no in enumerate(numbers)
            ))  # fmt: skip
            for i, no in enumerate(numbers):
                assert pub.next() == Puback(i + 1)
                acked.append(no)
                if len(acked) == 3000:
                    srv.kill()  # mid-batch: the rest of this batch stays unacknowledged
    except (ConnectionError, OSError):
        pass
    assert len(acked) >= 3000
    srv.start()
    line = srv.line("MQTT persistence on - recovered 1 sessions, ")
    assert line is not None
    pending = int(line.split(", ")[1].split()[0])
    assert pending >= len(acked)
    sub = RawSession(port(srv))
    sub.connect("load-sub", clean=False, expect=None)
    got = [int.from_bytes(sub.receive().payload[:4], "big") for _ in range(pending)]
    sub.ping()
    assert got == sorted(set(got))  # in order, no duplicates
    assert set(acked) <= set(got)  # nothing acknowledged is lost


def test_sigkill_many_publishers_many_durable_sessions(start_mqtt: Start) -> None:
    """4 publishers (QoS 1 and 2, pipelined) and 3 persistent subscribers (one connected
    and acknowledging, two offline); SIGKILL mid-stream. After the restart each
    subscriber gets every acknowledged message, each publisher's messages in order."""
    srv = start_mqtt()
    for name in ("s-off1", "s-off2", "s-on"):
        s = RawSession(port(srv))
        s.connect(name, clean=False)
        s.subscribe(1, ("many/#", 2))
        if name != "s-on":
            s.disconnect()
    online = RawSession(port(srv))
    online.connect("s-on", clean=False, expect=None)

    before: dict[int, set[int]] = {p: set() for p in range(4)}  # what "s-on" got pre-kill

    def consume() -> None:  # the connected subscriber acknowledges as it goes
        try:
            while True:
                pkt = online.receive()
                before[pkt.payload[0]].add(int.from_bytes(pkt.payload[1:5], "big"))
        except (ConnectionError, OSError, TimeoutError):
            pass

    threading.Thread(target=consume, daemon=True).start()
    acked: dict[int, list[int]] = {p: [] for p in range(4)}
    enough = threading.Barrier(5)

    def publisher(p: int) -> None:
        c = RawSession(port(srv))
        c.connect(f"p{p}")
        qos = 1 + p % 2
        no = 0
        try:
            while True:
                nos = list(range(no + 1, no + 33))
                no += 32
                c.send(b"".join(
                    encode(Publish(f"many/{p}", bytes([p]) + n.to_bytes(4, "big"), qos,
                                   packet_id=i + 1))
                    for i, n in enumerate(nos)
                ))  # fmt: skip
                for i, n in enumerate(nos):
                    # PUBREC is the QoS 2 acknowledgement that means "on disk".
                    assert c.next() == (Pubrec(i + 1) if qos == 2 else Puback(i + 1))
                    acked[p].append(n)
                if qos == 2:  # release the ids before reusing them (4.3.3)
                    c.send(b"".join(encode(Pubrel(i + 1)) for i in range(32)))
                    for i in range(32):
                        assert c.next() == Pubcomp(i + 1)
                if len(acked[p]) == 320:
                    enough.wait(30)
        except (ConnectionError, OSError, threading.BrokenBarrierError):
            pass

    threads = [threading.Thread(target=publisher, args=(p,), daemon=True) for p in range(4)]
    for t in threads:
        t.start()
    enough.wait(60)  # every publisher has >= 320 acknowledged messages
    srv.kill()
    for t in threads:
        t.join(30)
    srv.start()
    sessions = {r["client"]: r for r in cli_rows(srv, "sessions")}
    for name in ("s-off1", "s-off2", "s-on"):
        owed = sessions[name]["queued"]  # after a restart everything owed is queued
        sub = RawSession(port(srv))
        sub.connect(name, clean=False, expect=None)
        got: dict[int, list[int]] = {p: [] for p in range(4)}
        for _ in range(owed):
            pkt = sub.receive()
            got[pkt.payload[0]].append(int.from_bytes(pkt.payload[1:5], "big"))
        sub.ping()  # and nothing more
        for p in range(4):
            assert got[p] == sorted(set(got[p])), (name, p)  # in order, once
            # "s-on" acknowledged some before the kill: those may or may not come again.
            seen = set(got[p]) | (before[p] if name == "s-on" else set())
            assert set(acked[p]) <= seen, (name, p, len(acked[p]), len(got[p]))

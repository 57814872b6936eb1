"""Sans-IO micro-benchmark of the MQTT per-message path: µs of Python per message.

``python tools/mqtt_path_bench.py [-c CASE ...] [--count N] [--repeats R] [--profile CASE]``

Drives real ``MqttProtocol`` objects the way ``tests/mqtt/test_protocol.py``'s ``Peer``
does (a real ``Broker`` on a real ``Store`` in a temporary directory, an empty ``Bus`` as
``server.py`` wires one, a fake outlet that records bytes and reports them sent the way
``oxiedge.net.output.Output`` does, calling ``on_sent``), one message per read as a
latency client sends them. No socket, no trio task switch: what is timed is the protocol,
the handlers, the router, the session and the codecs, plus a few lines of harness.

Cases (clean sessions, topic ``bench/path``, ``--payload`` bytes):

- ``qos1``: one client, QoS 1 PUBLISH -> PUBACK, no subscriber (``mqtt-qos1-seq``);
- ``qos1-sub``: publisher + one QoS 1 subscriber: PUBLISH -> PUBACK + delivery, then the
  subscriber's PUBACK (``mqtt-qos1-latency-paho``);
- ``qos0-sub``: the same at QoS 0 (no acknowledgements);
- ``qos0-fan``: QoS 0 to ten subscribers (``mqtt-fanout``; µs per message, not delivery);
- ``qos2``: one client, QoS 2 PUBLISH -> PUBREC, PUBREL -> PUBCOMP, no subscriber;
- ``durable``: QoS 1 to an offline persistent session (``mqtt-durable-offline``): every
  read commits (a real sync) before its PUBACKs.

``--burst K`` sends K messages per read (their replies and deliveries in one flush), as
the pipelined throughput scenarios (``mqtt-qos0``, ``mqtt-qos1``, ``mqtt-fanout``) do: the
per-read work is shared, the per-message path is what is left.

Prints CPU µs per message (``time.process_time``: steadier than wall time on a shared
machine), the median of ``--repeats`` runs of ``--count`` messages (and the min and max).
``--pace MS`` sleeps MS between messages and times each one (wall clock, median): the
path with cold caches, as at the 1 msg/ms of ``mqtt-qos1-latency-paho``, where it costs
several times its back-to-back figure (noisy: it depends on what else ran on the core).
``--spin`` paces by busy-waiting instead of sleeping: the same pace on a CPU that never
goes idle (on a VM the sleep halts the vCPU; the gap between the two is what the halt
costs the next message, bench/README.md "Session 17").
``--profile CASE`` runs that case once under cProfile instead and prints the top functions.
``--mqtt-version 5`` runs the cases with MQTT 5 clients (packets without properties).
``--tree DIR`` imports oxiedge from DIR (e.g. a ``git archive`` of main in /tmp) for a
"before" figure in the same invocation. A profiling helper only; the server never
imports it.
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CASES = ("qos1", "qos1-sub", "qos0-sub", "qos0-fan", "qos2", "durable")
#: Subscribers of ``qos0-fan`` (``mqtt-fanout``'s 10).
FAN = 10
TOPIC = "bench/path"


class Wire:
    """The outlet: buffers writes like the transport, ``flush`` "sends" them."""

    def __init__(self) -> None:
        self.out_bytes = 0
        self.protocol: Any = None
        self.out: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.out.append(data)
        self.out_bytes += len(data)

    def deliver_now(self) -> None:
        pass

    def abort(self) -> None:
        raise AssertionError("aborted")

    def flush(self) -> bytes:
        """Everything written since the last flush, as one send; then ``on_sent``."""
        out = self.out
        if not out:
            return b""
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        self.out_bytes -= len(data)
        self.protocol.on_sent()
        return data


class Harness:
    """One broker, its store, and the connections of a case."""

    def __init__(self, store: Any, mods: dict[str, Any]) -> None:
        self.mods = mods
        self.store = store
        limits = mods["Limits"](1000)
        self.broker = mods["Broker"](store, limits)
        self.broker.bus = mods["Bus"](None, None, None)

    def peer(self, client_id: str) -> tuple[Any, Wire]:
        m = self.mods
        wire = Wire()
        proto = m["MqttProtocol"](
            self.broker, wire, max_packet_size=1 << 20, max_connect_size=1 << 16,
            connect_timeout=10.0, perms=m["PermissionStore"](None),
            alarms=m["ResourceAlarms"](Path("."), 1 << 40, 0),
            log=logging.getLogger("bench"), clock=time.monotonic)  # fmt: skip
        wire.protocol = proto
        return proto, wire


def _load(tree: str | None) -> dict[str, Any]:
    if tree:
        sys.path.insert(0, tree)
    from oxiedge.access.rules import PermissionStore
    from oxiedge.alarms import ResourceAlarms
    from oxiedge.bus import Bus
    from oxiedge.mqtt.broker import Broker
    from oxiedge.mqtt.codec import encode
    from oxiedge.mqtt.encode import DISCONNECT_BYTES
    from oxiedge.mqtt.encode5 import encode5
    from oxiedge.mqtt.packets import Connect, Publish, Subscribe
    from oxiedge.mqtt.packets5 import Connect5, Publish5, Subscribe5, Subscription
    from oxiedge.mqtt.properties import Properties
    from oxiedge.mqtt.protocol import MqttProtocol
    from oxiedge.mqtt.session import Limits
    from oxiedge.net import COMMIT, KICK, NEED_DATA, SEND, Authenticate, Close
    from oxiedge.store import Store

    return {"PermissionStore": PermissionStore, "ResourceAlarms": ResourceAlarms, "Bus": Bus,
            "Broker": Broker, "encode": encode, "Connect": Connect, "Publish": Publish,
            "Subscribe": Subscribe, "MqttProtocol": MqttProtocol, "Limits": Limits,
            "COMMIT": COMMIT, "NEED_DATA": NEED_DATA, "SEND": SEND,
            "Authenticate": Authenticate, "Store": Store, "encode5": encode5,
            "Connect5": Connect5, "Publish5": Publish5, "Subscribe5": Subscribe5,
            "Subscription": Subscription, "level": 4, "Close": Close, "KICK": KICK,
            "DISCONNECT": DISCONNECT_BYTES, "Properties": Properties}


def drive(proto: Any, wire: Wire, data: bytes, m: dict[str, Any]) -> bytes:
    """Feed one read; perform the actions up to NEED_DATA; the bytes sent back."""
    proto.receive_data(data)
    need, send = m["NEED_DATA"], m["SEND"]
    while True:
        action = proto.next_action()
        if action is need or action is send:
            reply = proto.data_to_send()
            if reply:
                wire.write(reply)
            if action is need:
                return wire.flush()
        elif action is m["COMMIT"]:  # (set-up, and ``durable``: its every read)
            m["store"].committer.commit_blocking()
            proto.commit_done(None)
        elif type(action) is m["Authenticate"]:
            proto.authenticated(True)
        elif action is m["KICK"]:  # (staged work nobody waits for: a DISCONNECT's record)
            m["store"].committer.commit_blocking()
        elif type(action) is m["Close"]:  # (after a DISCONNECT)
            return wire.flush()
        else:
            raise AssertionError(f"unexpected action {action!r}")


def connect(h: Harness, client_id: str, subscribe: int | None = None,
            clean: bool = True) -> tuple[Any, Wire]:
    m = h.mods
    proto, wire = h.peer(client_id)
    if m["level"] == 5:
        # (a persistent session asks to outlive its connection, as bench/mqttwire.py does)
        props = m["Properties"](session_expiry_interval=None if clean else 0xFFFFFFFF)
        out = drive(proto, wire, m["encode5"](m["Connect5"](client_id, clean, properties=props)),
                    m)  # fmt: skip
        assert out[:1] == b"\x20" and out[3] == 0, out
        if subscribe is not None:
            sub = m["Subscribe5"](1, (m["Subscription"](TOPIC, subscribe),))
            out = drive(proto, wire, m["encode5"](sub), m)
            assert out == b"\x90\x04\x00\x01\x00" + bytes((subscribe,)), out
        return proto, wire
    out = drive(proto, wire, m["encode"](m["Connect"](client_id, clean)), m)
    assert out[:2] == b"\x20\x02" and out[3] == 0, out
    if subscribe is not None:
        out = drive(proto, wire, m["encode"](m["Subscribe"](1, ((TOPIC, subscribe),))), m)
        assert out == b"\x90\x03\x00\x01" + bytes((subscribe,)), out
    return proto, wire


def _publishes(m: dict[str, Any], qos: int, payload: bytes) -> list[bytes]:
    """The PUBLISH packets of ids 1..65535 (one if QoS 0)."""
    if m["level"] == 5:
        enc, pub = m["encode5"], m["Publish5"]
        if qos == 0:
            return [enc(pub(TOPIC, payload, 0))]
        return [enc(pub(TOPIC, payload, qos, packet_id=i)) for i in range(1, 65536)]
    if qos == 0:
        return [m["encode"](m["Publish"](TOPIC, payload, 0))]
    return [m["encode"](m["Publish"](TOPIC, payload, qos, packet_id=i)) for i in range(1, 65536)]


def make_case(case: str, h: Harness, payload: bytes, burst: int = 1) -> Callable[[int], None]:
    """The function that sends messages ``i * burst`` ... ``i * burst + burst - 1`` of
    ``case`` through the broker, ``burst`` of them in one read."""
    m = h.mods
    level5 = m["level"] == 5
    if case in ("qos1", "qos2"):
        qos = 1 if case == "qos1" else 2
        pub, pw = connect(h, "pub")
        pkts = _publishes(m, qos, payload)
        # MQTT 5: PUBACK/PUBREC 0x10, no matching subscribers
        first = 0x40 if qos == 1 else 0x50
        acks = [bytes((first, 3 if level5 else 2)) + i.to_bytes(2, "big")
                + (b"\x10" if level5 else b"") for i in range(1, 65536)]
        rels = [b"\x62\x02" + i.to_bytes(2, "big") for i in range(1, 65536)]
        comps = [b"\x70\x02" + i.to_bytes(2, "big") for i in range(1, 65536)]

        def one(i: int) -> None:
            ns = [(i * burst + k) % 65535 for k in range(burst)]
            if drive(pub, pw, b"".join([pkts[n] for n in ns]), m) != b"".join(
                    [acks[n] for n in ns]):  # fmt: skip
                raise AssertionError("no PUBACK/PUBREC")
            if qos == 2 and drive(pub, pw, b"".join([rels[n] for n in ns]), m) != b"".join(
                    [comps[n] for n in ns]):  # fmt: skip
                raise AssertionError("no PUBCOMP")
        return one
    if case == "durable":
        sub, sw = connect(h, "durable-sub", 1, clean=False)
        drive(sub, sw, m["DISCONNECT"], m)  # offline from now on
        sub.connection_closed()
        pub, pw = connect(h, "pub")
        pkts = _publishes(m, 1, payload)
        acks = [b"\x40\x02" + i.to_bytes(2, "big") for i in range(1, 65536)]

        def one_durable(i: int) -> None:
            ns = [(i * burst + k) % 65535 for k in range(burst)]
            if drive(pub, pw, b"".join([pkts[n] for n in ns]), m) != b"".join(
                    [acks[n] for n in ns]):  # fmt: skip
                raise AssertionError("no PUBACK")
        return one_durable
    qos = 1 if case == "qos1-sub" else 0
    subs = [connect(h, f"sub{k}", qos) for k in range(FAN if case == "qos0-fan" else 1)]
    sub, sw = subs[0]
    pub, pw = connect(h, "pub")
    pkts = _publishes(m, qos, payload)
    acks = [b"\x40\x02" + i.to_bytes(2, "big") for i in range(65536)]
    # the packet id sits right before the payload (MQTT 5: and the property length)
    tail = len(payload) + 2 + (1 if level5 else 0)

    if qos == 0:
        data = pkts[0] * burst
        want = len(data)

        def one0(i: int) -> None:
            drive(pub, pw, data, m)
            for _s, w in subs:
                if len(w.flush()) != want:
                    raise AssertionError("no delivery")
        return one0

    size = len(pkts[0])

    def one1(i: int) -> None:
        drive(pub, pw, b"".join([pkts[(i * burst + k) % 65535] for k in range(burst)]), m)
        got = sw.flush()  # the deliveries, as the subscriber's writer sends them
        pids = [(got[j * size + size - tail] << 8) | got[j * size + size - tail + 1]
                for j in range(burst)]
        drive(sub, sw, b"".join([acks[pid] for pid in pids]), m)  # the subscriber's PUBACKs
    return one1


def _spin_sleep(seconds: float) -> None:
    """``--spin``: wait without letting the CPU go idle."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def timed(one: Callable[[int], None], count: int, pace: float, spin: bool = False,
          burst: int = 1) -> float:
    """µs per message: CPU time of ``count`` back to back; with ``pace`` (seconds between
    messages, as a 1 msg/ms latency client sends them) the median wall time of one, the
    pause slept (or, with ``spin``, busy-waited)."""
    if not pace:
        t0 = time.process_time()  # CPU time: load on a shared VM moves it less
        for i in range(count // burst):
            one(i)
        return (time.process_time() - t0) / (count // burst * burst) * 1e6
    each = []
    clock, sleep = time.perf_counter_ns, (_spin_sleep if spin else time.sleep)
    for i in range(count):
        sleep(pace)
        t0 = clock()
        one(i)
        each.append(clock() - t0)
    return statistics.median(each) / 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-c", "--case", action="append", choices=CASES)
    p.add_argument("--count", type=int, default=100_000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--payload", type=int, default=100)
    p.add_argument("--pace", type=float, default=0.0,
                   help="ms between messages (cold caches, as at 1 msg/ms); wall time")
    p.add_argument("--spin", action="store_true",
                   help="with --pace: busy-wait between messages instead of sleeping")
    p.add_argument("--burst", type=int, default=1,
                   help="messages per read (the throughput scenarios' pipelining)")
    p.add_argument("--profile", choices=CASES)
    p.add_argument("--tree", help="import oxiedge from this directory")
    p.add_argument("--mqtt-version", default="3.1.1", choices=["3.1.1", "5"])
    a = p.parse_args()
    m = _load(a.tree)
    m["level"] = 5 if a.mqtt_version == "5" else 4
    payload = bytes(range(256))[: a.payload] * (a.payload // 256 + 1)
    payload = payload[: a.payload]
    import oxiedge

    print(f"oxiedge from {Path(oxiedge.__file__).parent}; payload {a.payload} B")
    with tempfile.TemporaryDirectory() as tmp:
        store = m["store"] = m["Store"].open(Path(tmp) / "db")
        try:
            if a.profile:
                h = Harness(store, m)
                one = make_case(a.profile, h, payload, a.burst)
                prof = cProfile.Profile()
                prof.runcall(timed, one, a.count, 0.0, False, a.burst)
                pstats.Stats(prof).sort_stats("tottime").print_stats(45)
                return
            for case in a.case or CASES:
                h = Harness(store, m)
                one = make_case(case, h, payload, a.burst)
                times = [timed(one, a.count, a.pace / 1e3, a.spin, a.burst)
                         for _ in range(a.repeats)]
                print(f"{case:9s} {statistics.median(times):6.2f} µs/msg  "
                      f"(min {min(times):.2f}, max {max(times):.2f}; "
                      f"{a.repeats} x {a.count})")
        finally:
            store.close()


if __name__ == "__main__":
    main()

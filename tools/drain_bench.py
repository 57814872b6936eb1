"""Sans-IO drain of a deep offline backlog: µs and Python calls per message.

``python tools/drain_bench.py [--count N] [--tree DIR] [--profile]``

A persistent QoS 1 subscriber (``backlog-sub``) subscribes and goes away; a publisher fills
N messages (``--payload`` bytes, 1000 PUBLISHes per read, one commit round each); every
round is synced. Then the subscriber reconnects and drains the session, acknowledging
every PUBLISH of each send at once (one read of PUBACKs per send, as ``bench/backlog.py``'s
raw subscriber does), each commit round run when the protocol asks for it. What is timed
(CPU time) and counted (cProfile: Python and builtin calls) is the drain only: read-back
from RocksDB, delivery, acknowledgement, the rounds' range deletes. Real ``Broker`` on a
real ``Store`` (the harness of ``mqtt_path_bench.py``); ``--tree DIR`` imports oxiedge
from DIR for a "before" figure. A profiling helper only; the server never imports it.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mqtt_path_bench import TOPIC, Harness, _load


def drive(proto: Any, wire: Any, data: bytes, m: dict[str, Any]) -> bytes:
    """``mqtt_path_bench.drive`` that also runs a commit round when the protocol staged
    durable work (``KICK``) and lets a long burst go on (``CHECKPOINT``)."""
    proto.receive_data(data)
    need, send, kicked = m["NEED_DATA"], m["SEND"], False
    while True:
        action = proto.next_action()
        if action is need or action is send:
            reply = proto.data_to_send()
            if reply:
                wire.write(reply)
            if action is need:
                if kicked:
                    m["store"].committer.commit_blocking()
                return wire.flush()
        elif action is m["COMMIT"]:
            m["store"].committer.commit_blocking()
            proto.commit_done(None)
        elif action is m["KICK"]:
            kicked = True
        elif action is m["CHECKPOINT"]:
            pass
        elif type(action) is m["Authenticate"]:
            proto.authenticated(True)
        else:
            raise AssertionError(f"unexpected action {action!r}")


def _connect(h: Harness, client_id: str, clean: bool) -> tuple[Any, Any, bytes]:
    m = h.mods
    proto, wire = h.peer(client_id)
    out = drive(proto, wire, m["encode"](m["Connect"](client_id, clean_session=clean)), m)
    return proto, wire, out


def fill(h: Harness, n: int, payload: bytes) -> None:
    m = h.mods
    sub, sw, _ = _connect(h, "backlog-sub", False)
    drive(sub, sw, m["encode"](m["Subscribe"](1, ((TOPIC, 1),))), m)
    sub.connection_lost("bench")
    sub.connection_closed()
    pub, pw, _ = _connect(h, "backlog-pub", True)
    pkts = [m["encode"](m["Publish"](TOPIC, payload, 1, packet_id=i)) for i in range(1, 1001)]
    block = b"".join(pkts)
    for _ in range(n // 1000):
        drive(pub, pw, block, m)
    pub.connection_lost("bench")
    pub.connection_closed()
    h.store.committer.commit_blocking()  # every round synced: the backlog is on disk


def _acks(data: bytes) -> tuple[int, bytes]:
    """The PUBLISHes in ``data`` (whole packets): their count and the PUBACKs for them."""
    acks, pos, got = [], 0, 0
    while pos < len(data):
        mult, length, i = 1, 0, pos + 1
        while True:
            d = data[i]
            length += (d & 0x7F) * mult
            mult *= 128
            i += 1
            if not d & 0x80:
                break
        if data[pos] & 0xF0 == 0x30:
            tlen = (data[i] << 8) | data[i + 1]
            acks.append(b"\x40\x02" + data[i + 2 + tlen: i + 4 + tlen])
            got += 1
        pos = i + length
    return got, b"".join(acks)


def drain(h: Harness, n: int) -> int:
    m = h.mods
    sub, sw, out = _connect(h, "backlog-sub", False)
    got = 0
    data = out[4:]  # after the CONNACK
    while got < n:
        k, acks = _acks(data)
        got += k
        if not acks:
            data = sw.flush()
            if not data:
                break
            continue
        data = drive(sub, sw, acks, m)
    sub.connection_lost("bench")
    sub.connection_closed()
    h.store.committer.commit_blocking()
    return got


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--count", type=int, default=200_000)
    p.add_argument("--payload", type=int, default=100)
    p.add_argument("--tree", help="import oxiedge from this directory")
    p.add_argument("--profile", action="store_true", help="print the top functions too")
    a = p.parse_args()
    m = _load(a.tree)
    from oxiedge.net import CHECKPOINT, KICK

    m["KICK"], m["CHECKPOINT"] = KICK, CHECKPOINT
    import oxiedge

    payload = (bytes(range(256)) * (a.payload // 256 + 1))[: a.payload]
    with tempfile.TemporaryDirectory() as tmp:
        store = m["store"] = m["Store"].open(Path(tmp) / "db")
        try:
            h = Harness(store, m)
            # The per-session bounds lifted to hold the backlog (as bench/backlog.py).
            h.broker = m["Broker"](store, m["Limits"](a.count + 1000, queue_bytes=1 << 36))
            h.broker.bus = m["Bus"](None, None, None)
            fill(h, a.count, payload)
            n = a.count // 1000 * 1000
            t0 = time.process_time()
            got = drain(h, n)
            cpu = time.process_time() - t0
            fill(h, a.count, payload)  # again, counted this time
            prof = cProfile.Profile()
            got2 = prof.runcall(drain, h, n)
            st = pstats.Stats(prof)
            calls = st.total_calls  # type: ignore[attr-defined]
            print(f"{Path(oxiedge.__file__).parent}: drained {got}/{n} and {got2}/{n}: "
                  f"{cpu / max(1, got) * 1e6:.2f} µs/msg CPU, "
                  f"{calls / max(1, got2):.1f} calls/msg")
            if a.profile:
                st.sort_stats("tottime").print_stats(30)
        finally:
            store.close()


if __name__ == "__main__":
    sys.exit(main())

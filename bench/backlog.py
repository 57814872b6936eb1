"""A deep backlog in one offline MQTT session: memory, restart and SD-card cost.

``python -m bench.backlog [--messages 1000000] [--payload 100] [--json FILE]``

Sequence: start oxiedge (the per-session bounds lifted to hold N) → RSS idle → one
persistent QoS 1 subscriber goes offline → a raw publisher fills N QoS 1 messages, 500 in
flight (fill rate, bytes the broker wrote: ``/proc/PID/io`` write_bytes) → RSS full →
SIGKILL → restart on the same data dir (time from exec to ``oxiedge ready``, RSS after
the restart) → the subscriber reconnects and drains everything, acknowledging each
message (drain rate, bytes written) → RSS after the drain. RSS per queued message is
``(full - idle) / N``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import struct
import sys
import time
from pathlib import Path
from typing import Any

from bench import brokers, procstat
from bench.brokers import Started, Target
from bench.machine import describe, one_line
from bench.mqttwire import RawMqtt
from bench.result import Meter, Options
from bench.scen_mqtt import _pipelined_qos1

TOPIC = "bench/backlog"


def rss_mb(t: Target, pause: float = 2.0) -> float:
    time.sleep(pause)  # let the allocator and the last commit round settle
    s = procstat.sample(t.pid)
    return s.rss / 1e6 if s else float("nan")


def written(pid: int | None) -> int:
    """Bytes the process caused to be written to storage (``/proc/PID/io`` write_bytes)."""
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def fill(t: Target, n: int, payload: int) -> tuple[int, float]:
    """The offline session gets ``n`` QoS 1 messages: (acknowledged, seconds)."""
    assert t.mqtt is not None
    sub = RawMqtt(*t.mqtt)
    sub.connect("backlog-sub", clean=False)
    sub.subscribe(TOPIC, 1)
    sub.disconnect()
    pub = RawMqtt(*t.mqtt)
    pub.connect("backlog-pub")
    o = Options(count=n, duration=3600, window=500, idle_timeout=30, payload=payload)
    acked, elapsed, _sent = _pipelined_qos1(pub, TOPIC, o, Meter(None))
    pub.disconnect()
    return acked, elapsed


def drain(t: Target, n: int) -> tuple[int, float]:
    """The subscriber takes ``n`` messages, acknowledging each: (received, seconds)."""
    assert t.mqtt is not None
    sub = RawMqtt(*t.mqtt)
    sub.connect("backlog-sub", clean=False)
    sock = sub.sock
    sock.settimeout(30)
    buf = bytearray(sub.buf)
    got = 0
    t0 = time.perf_counter()
    while got < n:
        acks = []
        pos = 0
        while True:  # every whole packet in buf
            if len(buf) - pos < 2:
                break
            mult, length, i = 1, 0, pos + 1
            while i < len(buf):
                d = buf[i]
                length += (d & 0x7F) * mult
                mult *= 128
                i += 1
                if not d & 0x80:
                    break
            else:
                break
            if len(buf) < i + length:
                break
            if buf[pos] & 0xF0 == 0x30:  # PUBLISH: topic length, topic, packet id
                tlen = struct.unpack_from(">H", buf, i)[0]
                pid = struct.unpack_from(">H", buf, i + 2 + tlen)[0]
                acks.append(b"\x40\x02" + pid.to_bytes(2, "big"))
                got += 1
            pos = i + length
        del buf[:pos]
        if acks:
            sock.sendall(b"".join(acks))
        if got >= n:
            break
        try:
            chunk = sock.recv(1 << 16)
        except TimeoutError:
            break
        if not chunk:
            break
        buf += chunk
    elapsed = time.perf_counter() - t0
    sub.disconnect()
    return got, elapsed


def run(a: argparse.Namespace) -> dict[str, Any]:
    n = a.messages
    args = ["--mqtt-queue-limit", str(n + 1000), "--mqtt-queue-bytes", "64GiB",
            "--amqp-port", "off", *a.oxiedge_arg]
    st: Started = brokers.start_oxiedge(args, timeout=300)
    data = st.tmp / "data"
    tmps = [st.tmp]
    out: dict[str, Any] = {"messages": n, "payload": a.payload}
    try:
        out["rss_idle_mb"] = rss_mb(st.target)
        w0 = written(st.target.pid)
        acked, secs = fill(st.target, n, a.payload)
        out.update(filled=acked, fill_s=secs, fill_msg_s=acked / secs if secs else 0.0)
        out["rss_full_mb"] = rss_mb(st.target)
        out["fill_write_bytes"] = written(st.target.pid) - w0
        out["rss_per_msg_b"] = (out["rss_full_mb"] - out["rss_idle_mb"]) * 1e6 / max(1, acked)
        st.stop(remove=False, sig=signal.SIGKILL)
        st = brokers.start_oxiedge(args, data=data, timeout=300)
        tmps.append(st.tmp)
        out["ready_after_sigkill_s"] = st.ready_s
        out["recovered"] = [x for x in st.log_lines if "recovered" in x]
        out["rss_after_restart_mb"] = rss_mb(st.target)
        w0 = written(st.target.pid)
        got, secs = drain(st.target, acked)
        out.update(drained=got, drain_s=secs, drain_msg_s=got / secs if secs else 0.0)
        out["drain_write_bytes"] = written(st.target.pid) - w0
        out["rss_drained_mb"] = rss_mb(st.target)
    finally:
        st.stop(remove=False)
        for d in tmps:
            shutil.rmtree(d, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.backlog", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--payload", type=int, default=100)
    p.add_argument("--oxiedge-arg", action="append", default=[])
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    info = describe(".")
    print("machine:", one_line(info), flush=True)
    r = run(a)
    print(json.dumps(r, default=str), flush=True)
    print()
    print("| N | RSS idle / full / after SIGKILL+restart / drained MB | B per msg | "
          "ready after SIGKILL s | fill msg/s | drain msg/s | written fill / drain B per msg |")
    print("|---|---|---|---|---|---|---|")
    n = max(1, r.get("filled", 0))
    print(f"| {r['messages']:,} | {r['rss_idle_mb']:.1f} / {r['rss_full_mb']:.1f} / "
          f"{r['rss_after_restart_mb']:.1f} / {r['rss_drained_mb']:.1f} | "
          f"{r['rss_per_msg_b']:.1f} | {r['ready_after_sigkill_s']:.2f} | "
          f"{r['fill_msg_s']:,.0f} | {r['drain_msg_s']:,.0f} | "
          f"{r['fill_write_bytes'] / n:.0f} / {r['drain_write_bytes'] / n:.0f} |")
    if a.json:
        a.json.write_text(json.dumps({"machine": info, "result": r}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

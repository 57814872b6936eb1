"""A deep backlog in one offline MQTT session: memory, restart and SD-card cost.

``python -m bench.backlog [--messages 1000000] [--payload 100] [--json FILE]
[--tree LABEL=DIR ...] [--rounds R] [--py-spy PATH] [--memory-max 512M]``

Sequence: start oxiedge (the per-session bounds lifted to hold N) → RSS idle → one
persistent QoS 1 subscriber goes offline → a raw publisher fills N QoS 1 messages, 500 in
flight (fill rate, bytes the broker wrote: ``/proc/PID/io`` write_bytes) → RSS full →
SIGKILL → restart on the same data dir (time from exec to ``oxiedge ready``, RSS after
the restart) → the subscriber reconnects and drains everything, acknowledging each
message (drain rate, bytes written) → RSS after the drain. RSS per queued message is
``(full - idle) / N``.

``--tree LABEL=DIR`` (repeatable) runs the same sequence against another checkout with its
own ``.venv`` (``DIR/.venv/bin/python -m oxiedge``), ``--rounds`` times, the trees taking
turns: a before/after in one invocation on a machine whose load moves. ``--py-spy PATH``
samples the broker during each drain (``--format raw``: collapsed stacks, next to the JSON;
``--gil``: the thread that holds the GIL, so CPU in Python rather than waits).
``--memory-max`` runs the broker in a systemd scope with ``MemoryMax`` where ``systemd-run
--scope`` works; where it does not (no systemd as PID 1, as in a container) the run records
the broker's peak RSS (``VmHWM``) after the fill and after the drain and whether it stayed
under the cap (``within_cap``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable
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


def peak_rss_mb(pid: int | None) -> float:
    """The process's peak resident set (``/proc/PID/status`` VmHWM) in MB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    return float("nan")


def memory_cap(limit: str) -> tuple[list[str], str]:
    """The command prefix that runs the broker under a memory cap of ``limit`` (``512M``),
    and how: a systemd scope where ``systemd-run`` works, else none - the fallback is the
    peak-RSS check of ``run`` (``VmHWM`` of the broker against the cap after every step)."""
    if not limit:
        return [], ""
    prefix = ["systemd-run", "--scope", "--quiet", "-p", f"MemoryMax={limit}"]
    try:
        ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if ok:
        return prefix, f"systemd-run --scope -p MemoryMax={limit}"
    return [], f"peak RSS (VmHWM) checked against {limit} (systemd-run --scope unavailable)"


def _bytes_of(limit: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(limit[:-1]) * units[limit[-1].upper()] if limit[-1:].isalpha() else int(limit)


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


def run(a: argparse.Namespace, tree: Path | None = None, spy: Path | None = None
        ) -> dict[str, Any]:
    n = a.messages
    args = ["--mqtt-queue-limit", str(n + 1000), "--mqtt-queue-bytes", "64GiB",
            "--amqp-port", "off", *a.oxiedge_arg]
    prefix, how = memory_cap(a.memory_max)
    st: Started = brokers.start_oxiedge(args, timeout=300, tree=tree, cpu_prefix=prefix)
    data = st.tmp / "data"
    tmps = [st.tmp]
    out: dict[str, Any] = {"messages": n, "payload": a.payload, "memory_cap": how}
    peaks: list[float] = []
    try:
        out["rss_idle_mb"] = rss_mb(st.target)
        w0 = written(st.target.pid)
        acked, secs = fill(st.target, n, a.payload)
        out.update(filled=acked, fill_s=secs, fill_msg_s=acked / secs if secs else 0.0)
        out["rss_full_mb"] = rss_mb(st.target)
        out["fill_write_bytes"] = written(st.target.pid) - w0
        peaks.append(peak_rss_mb(st.target.pid))
        out["rss_per_msg_b"] = (out["rss_full_mb"] - out["rss_idle_mb"]) * 1e6 / max(1, acked)
        st.stop(remove=False, sig=signal.SIGKILL)
        st = brokers.start_oxiedge(args, data=data, timeout=300, tree=tree, cpu_prefix=prefix)
        tmps.append(st.tmp)
        out["ready_after_sigkill_s"] = st.ready_s
        out["recovered"] = [x for x in st.log_lines if "recovered" in x]
        out["rss_after_restart_mb"] = rss_mb(st.target)
        w0 = written(st.target.pid)
        sampler = None
        if a.py_spy and spy is not None:
            sampler = subprocess.Popen([a.py_spy, "record", "--format", "raw", "--rate", "200",
                                        "--gil", "--nonblocking",
                                        "--pid", str(st.target.pid), "--output", str(spy)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # attached before the drain starts
        c0 = procstat.sample(st.target.pid)
        got, secs = drain(st.target, acked)
        c1 = procstat.sample(st.target.pid)
        if c0 and c1:  # the broker's CPU per message drained: less load-dependent than rate
            out["drain_cpu_us"] = (c1.cpu - c0.cpu) * 1e6 / max(1, got)
        if sampler is not None:
            sampler.send_signal(signal.SIGINT)
            sampler.wait(30)
        out.update(drained=got, drain_s=secs, drain_msg_s=got / secs if secs else 0.0)
        out["drain_write_bytes"] = written(st.target.pid) - w0
        out["rss_drained_mb"] = rss_mb(st.target)
        peaks.append(peak_rss_mb(st.target.pid))
        out["peak_rss_mb"] = max(peaks)
        if a.memory_max:
            out["within_cap"] = out["peak_rss_mb"] * 1e6 <= _bytes_of(a.memory_max)
    finally:
        st.stop(remove=False)
        for d in tmps:
            shutil.rmtree(d, ignore_errors=True)
    return out


ROW = ("| tree | N | RSS idle / full / after SIGKILL+restart / drained MB | B per msg | "
       "ready after SIGKILL s | fill msg/s | drain msg/s | broker CPU µs per drained msg | "
       "written fill / drain B per msg |")


def row(label: str, r: dict[str, Any]) -> str:
    n = max(1, r.get("filled", 0))
    return (f"| {label} | {r['messages']:,} | {r['rss_idle_mb']:.1f} / {r['rss_full_mb']:.1f} / "
            f"{r['rss_after_restart_mb']:.1f} / {r['rss_drained_mb']:.1f} | "
            f"{r['rss_per_msg_b']:.1f} | {r['ready_after_sigkill_s']:.2f} | "
            f"{r['fill_msg_s']:,.0f} | {r['drain_msg_s']:,.0f} | "
            f"{r.get('drain_cpu_us', float('nan')):.1f} | {r['fill_write_bytes'] / n:.0f} / "
            f"{r['drain_write_bytes'] / n:.0f} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.backlog", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--payload", type=int, default=100)
    p.add_argument("--oxiedge-arg", action="append", default=[])
    p.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR",
                   help="also run against this checkout (its own .venv); repeatable")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--memory-max", default="", metavar="SIZE",
                   help="run the broker under this memory cap (512M; module docstring)")
    p.add_argument("--py-spy", help="py-spy executable: sample the broker during the drain")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)

    def one(label: str, k: int, tree: Path | None) -> dict[str, Any]:
        return run(a, tree, a.json.with_suffix(f".{label}.{k}.spy") if a.json else None)

    return in_turns(a, one, ROW, row)


def in_turns(a: argparse.Namespace, one: Callable[[str, int, Path | None], dict[str, Any]],
             header: str, row: Callable[[str, dict[str, Any]], str]) -> int:
    """``one(label, round, tree)`` for this checkout and every ``--tree LABEL=DIR``, the
    trees taking turns ``--rounds`` times: a JSON line per run, then the table (``header``,
    a ``row`` per run), and everything in ``--json``."""
    info = describe(".")
    print("machine:", one_line(info), flush=True)
    trees: list[tuple[str, Path | None]] = [("this", None)]
    for spec in a.tree:
        label, _, where = spec.partition("=")
        trees.append((label, Path(where).resolve()))
    results: list[dict[str, Any]] = []
    for k in range(a.rounds):
        for label, tree in trees:
            r = one(label, k, tree)
            r["tree"], r["round"] = label, k
            print(json.dumps(r, default=str), flush=True)
            results.append(r)
    print()
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for r in results:
        print(row(r["tree"], r))
    if a.json:
        a.json.write_text(json.dumps({"machine": info, "results": results}, indent=1,
                                     default=str))
    return 0

if __name__ == "__main__":
    sys.exit(main())

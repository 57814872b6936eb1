"""A deep backlog in one durable AMQP queue: memory, restart and drain, new and old code.

``python -m bench.backlog_amqp [--messages 1000000] [--payload 100] [--baseline DIR]
[--tree LABEL=DIR ...] [--rounds R] [--json FILE]``

Sequence per build: start oxiedge (per-queue bounds lifted to hold N) → RSS idle → a raw
confirmed publisher (``amqpwire``, 500 in flight) fills N persistent messages into a
durable queue nobody consumes (fill rate, bytes written: ``/proc/PID/io``) → RSS full →
SIGKILL → restart on the same data dir (exec to ``oxiedge ready``; RSS) → a pika consumer
(prefetch 1000, acknowledging every 100th delivery with ``multiple``) drains the queue
(drain rate, bytes written) → RSS drained. ``--baseline DIR``: the same on the checkout
in DIR (its own ``.venv``), in the same invocation, so the two are measured under the same
load. ``--tree LABEL=DIR`` (repeatable) adds more checkouts the same way; ``--rounds R``
repeats the whole sequence R times, the order of the builds reversed every other round (A B,
B A, ...) so that neither always runs first. RSS per queued message is ``(full - idle) / N``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench import procstat
from bench.amqpwire import ConfirmTracker, RawAmqp, publish_frames
from bench.backlog import rss_mb, written
from bench.brokers import Started, Target
from bench.machine import describe, one_line
from bench.scen_amqp import _pika_params

QUEUE = "bench.backlog"
ACK, NACK = (struct.pack(">HH", 60, m) for m in (80, 120))
_AMQP = re.compile(r"AMQP listening on (\S+):(\d+)")


def message_body(i: int, payload: int) -> bytes:
    """Message ``i``'s body: ``i`` (8 bytes big-endian), padded to ``payload`` bytes."""
    return i.to_bytes(8, "big") + b"x" * (payload - 8)


def publish(port: int, queue: str, seqs: Iterable[int], persistent: bool = True,
            payload: int = 100, expiration: str | None = None) -> int:
    """Publish ``body(i)`` for each ``i``, 500 in flight, confirmed (``expiration``: each
    with that per-message TTL, ms); returns how many were nacked (reject-publish)."""
    c = RawAmqp("127.0.0.1", port)
    c.confirm_select()
    tracker = ConfirmTracker()
    batch: list[bytes] = []
    sent = 0

    def settle(want: int) -> None:
        while tracker.settled < want:
            for ftype, _ch, p in c.frames():
                if ftype == 1 and p[:4] in (ACK, NACK):
                    tag, bits = struct.unpack_from(">QB", p, 4)
                    tracker.settle(tag, bool(bits & 1), p[:4] == NACK)
            if tracker.settled < want:
                c.fill(30)

    for i in seqs:
        batch.append(publish_frames(1, "", queue, message_body(i, payload), persistent,
                                    expiration))
        if len(batch) == 500:
            c.sock.sendall(b"".join(batch))
            sent += len(batch)
            batch.clear()
            settle(sent)
    if batch:
        c.sock.sendall(b"".join(batch))
        settle(sent + len(batch))
    c.close()
    return tracker.nacked


def start(root: Path, args: list[str], data: Path | None = None) -> Started:
    """``oxiedge serve`` of the checkout at ``root`` (its ``.venv``); waits for ready."""
    env = dict(os.environ, PYTHONPATH=str(root))
    python = str(root / ".venv/bin/python")
    tmp = Path(tempfile.mkdtemp(prefix="bench-amqp-backlog-"))
    # (cwd: ``-m`` imports from the current directory first)
    helped = subprocess.run([python, "-m", "oxiedge", "serve", "--help"], env=env, cwd=tmp,
                            capture_output=True, text=True).stdout
    http = ["--http-port", "off"] if "--http-port" in helped else []  # (an older build)
    cmd = [python, "-m", "oxiedge", "serve", "--data", str(data or tmp / "data"),
           "--bind", "127.0.0.1", "--mqtt-port", "off", "--amqp-port", "0", *http, *args]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp,
                            env=env)
    target = Target(root.name, pid=proc.pid)
    st = Started(target, proc, tmp)
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace").strip()
            if not ready.is_set():
                st.log_lines.append(line)
                if (m := _AMQP.search(line)) is not None:
                    target.amqp = (m.group(1), int(m.group(2)))
                if line == "oxiedge ready":
                    st.ready_s = time.monotonic() - t0
                    ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(600) or proc.poll() is not None or target.amqp is None:
        st.stop()
        raise RuntimeError("oxiedge did not become ready:\n" + "\n".join(st.log_lines[-20:]))
    return st


def drain(t: Target, n: int) -> tuple[int, float]:
    """A pika consumer takes ``n`` messages: (received, seconds)."""
    import pika

    c = pika.BlockingConnection(_pika_params(t))
    ch = c.channel()
    ch.basic_qos(prefetch_count=1000)
    got = 0
    t0 = time.perf_counter()
    for method, _props, _body in ch.consume(QUEUE, inactivity_timeout=30):
        if method is None:
            break
        got += 1
        if got % 100 == 0 or got == n:
            ch.basic_ack(method.delivery_tag, multiple=True)
        if got >= n:
            break
    elapsed = time.perf_counter() - t0
    ch.cancel()
    c.close()
    return got, elapsed


def run_one(root: Path, n: int, payload: int, extra: list[str]) -> dict[str, Any]:
    args = ["--amqp-queue-limit", str(n + 1000), "--amqp-queue-bytes", "64GiB", *extra]
    st = start(root, args)
    data = st.tmp / "data"
    tmps = [st.tmp]
    out: dict[str, Any] = {"build": str(root), "messages": n, "payload": payload}
    try:
        assert st.target.amqp is not None
        c = RawAmqp(*st.target.amqp)
        c.sock.sendall(_declare(QUEUE))
        c.expect(50, 11)
        c.close()
        out["rss_idle_mb"] = rss_mb(st.target)
        w0, c0 = written(st.target.pid), cpu(st.target)
        t0 = time.perf_counter()
        publish(st.target.amqp[1], QUEUE, range(n), payload=payload)
        secs = time.perf_counter() - t0
        out.update(filled=n, fill_s=secs, fill_msg_s=n / secs)
        out["rss_full_mb"] = rss_mb(st.target)
        out["fill_write_bytes"] = written(st.target.pid) - w0
        out["fill_cpu_us_msg"] = (cpu(st.target) - c0) * 1e6 / n
        out["rss_per_msg_b"] = (out["rss_full_mb"] - out["rss_idle_mb"]) * 1e6 / n
        st.stop(remove=False, sig=signal.SIGKILL)
        st = start(root, args, data=data)
        tmps.append(st.tmp)
        out["ready_after_sigkill_s"] = st.ready_s
        out["recovered"] = [x for x in st.log_lines if "recovered" in x]
        out["rss_after_restart_mb"] = rss_mb(st.target)
        w0, c0 = written(st.target.pid), cpu(st.target)
        out["restart_cpu_s"] = c0  # exec to ready (+2 s idle): start-up and recovery
        got, secs = drain(st.target, n)
        out.update(drained=got, drain_s=secs, drain_msg_s=got / secs if secs else 0.0)
        c1 = cpu(st.target)
        out["drain_cpu_us_msg"] = (c1 - c0) * 1e6 / max(1, got)
        # the whole job after the crash: a tree that decodes its backlog at start-up pays
        # before it is ready what one reading it back pays during the drain
        out["restart_and_drain_cpu_us_msg"] = c1 * 1e6 / max(1, got)
        out["drain_write_bytes"] = written(st.target.pid) - w0
        out["rss_drained_mb"] = rss_mb(st.target)
    finally:
        st.stop(remove=False)
        for d in tmps:
            shutil.rmtree(d, ignore_errors=True)
    return out


def cpu(t: Target) -> float:
    """The broker's CPU seconds so far (user + system)."""
    s = procstat.sample(t.pid)
    return s.cpu if s else 0.0


def _declare(queue: str) -> bytes:
    """queue.declare durable (channel 1), no arguments."""
    from bench.amqpwire import EMPTY_TABLE, method, shortstr

    return method(1, 50, 10, b"\x00\x00" + shortstr(queue) + bytes([0x02]) + EMPTY_TABLE)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.backlog_amqp", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--payload", type=int, default=100)
    p.add_argument("--baseline", type=Path, help="another checkout with its own .venv")
    p.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR",
                   help="one more checkout (its own .venv), repeatable")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--oxiedge-arg", action="append", default=[])
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    info = describe(".")
    print("machine:", one_line(info), flush=True)
    builds: list[tuple[str, Path]] = [("this", Path(__file__).resolve().parent.parent)]
    if a.baseline is not None:
        builds.append(("base", a.baseline.resolve()))
    for spec in a.tree:
        label, _, where = spec.partition("=")
        builds.append((label, Path(where).resolve()))
    results = []
    for k in range(a.rounds):
        for label, root in builds if k % 2 == 0 else builds[::-1]:
            r = run_one(root, a.messages, a.payload, a.oxiedge_arg)
            r["label"], r["round"] = label, k
            r["loadavg"] = os.getloadavg()
            print(json.dumps(r, default=str), flush=True)
            results.append(r)
    print()
    print("| build | round | load (1 min) | N | "
          "RSS idle / full / after SIGKILL+restart / drained MB | B per msg | "
          "ready after SIGKILL s | fill msg/s | drain msg/s (pika, prefetch 1000) | "
          "broker CPU fill / drain µs per msg | broker CPU exec to drained, µs per msg | "
          "written fill / drain B per msg |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        n = max(1, r["filled"])
        print(f"| {r['label']} | {r['round'] + 1} | {r['loadavg'][0]:.1f} | "
              f"{r['messages']:,} | {r['rss_idle_mb']:.1f} / "
              f"{r['rss_full_mb']:.1f} / {r['rss_after_restart_mb']:.1f} / "
              f"{r['rss_drained_mb']:.1f} | {r['rss_per_msg_b']:.1f} | "
              f"{r['ready_after_sigkill_s']:.2f} | {r['fill_msg_s']:,.0f} | "
              f"{r['drain_msg_s']:,.0f} | {r['fill_cpu_us_msg']:.1f} / "
              f"{r['drain_cpu_us_msg']:.1f} | "
              f"{r.get('restart_and_drain_cpu_us_msg', 0.0):.1f} | "
              f"{r['fill_write_bytes'] / n:.0f} / "
              f"{r['drain_write_bytes'] / n:.0f} |")
    if a.json:
        a.json.write_text(json.dumps({"machine": info, "results": results}, indent=1,
                                     default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

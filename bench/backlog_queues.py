"""Many durable AMQP queues with a backlog, and TTL expiry of a deep one (issue 37).

``python -m bench.backlog_queues [--queues 100] [--messages 2000] [--ttl-messages 200000]
[--ttl-ms 20000] [--stall-messages 200000] [--baseline DIR] [--json FILE]``

Three runs per build, each on a fresh data dir:

* **start-up**: ``--queues`` durable queues, ``--messages`` persistent 100 B messages each
  (raw confirmed publishers, ``backlog_amqp.publish``), SIGKILL, restart: RSS idle (before
  the fill) and after the restart, ready time, the broker's CPU seconds from its exec to
  two seconds after ready.
* **TTL expiry**: one durable queue with ``x-message-ttl`` and no dead-letter exchange gets
  ``--ttl-messages``; SIGKILL; the server stays down until every message is due, then
  starts: its CPU seconds until the queue is empty (``queue.declare`` passive polled every
  50 ms) - start-up included, so compare it with an idle start's (``idle_start_cpu_s``) -
  and the longest of those polls (connect, declare, close: ``longest_declare_s``).
* **TTL expiry while served** (``--stall-messages``): a first message without TTL, then the
  run with a per-message TTL of 1 ms behind it (due at once, but expired only at the head);
  SIGKILL, restart; one connection takes the first message, so the run is the head, and
  polls the queue's length (``queue.declare`` passive) on its open channel until it is
  empty: the longest of those round trips (``longest_rtt_s``: the event loop held by an
  expiry call, others waiting), how many answers saw the run partly expired
  (``answers_partway``), the broker's CPU seconds from the take to the end.

``--baseline DIR``: the same on the checkout in DIR (its own ``.venv``) in the same
invocation. CPU seconds (``/proc/PID/stat``) are steadier than times on a loaded machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pika

from bench.backlog import rss_mb
from bench.backlog_amqp import cpu, publish, start
from bench.brokers import Started
from bench.machine import describe


def _declare(st: Started, queue: str, arguments: dict[str, Any] | None = None) -> int:
    """Declare (passive when ``arguments`` is None) ``queue``; its message count."""
    assert st.target.amqp is not None
    c = pika.BlockingConnection(pika.ConnectionParameters(*st.target.amqp, heartbeat=0))
    try:
        ok = c.channel().queue_declare(queue, durable=True, passive=arguments is None,
                                       arguments=arguments)
        return int(ok.method.message_count)
    finally:
        c.close()


def idle_start(root: Path) -> float:
    """CPU seconds of a start on an empty data dir, two seconds after ready."""
    st = start(root, [])
    try:
        time.sleep(2)
        return cpu(st.target)
    finally:
        st.stop()


def startup(root: Path, queues: int, n: int) -> dict[str, Any]:
    st = start(root, [])
    data, tmps = st.tmp / "data", [st.tmp]
    out: dict[str, Any] = {"queues": queues, "messages_per_queue": n}
    try:
        out["rss_idle_mb"] = rss_mb(st.target)
        for k in range(queues):
            _declare(st, f"bench.q{k}", {})
        assert st.target.amqp is not None
        for k in range(queues):
            publish(st.target.amqp[1], f"bench.q{k}", range(n))
        st.stop(remove=False, sig=signal.SIGKILL)
        st = start(root, [], data=data)
        tmps.append(st.tmp)
        time.sleep(2)
        out.update(ready_s=st.ready_s, rss_after_restart_mb=rss_mb(st.target),
                   cpu_s=cpu(st.target),
                   recovered=[x for x in st.log_lines if "recovered" in x])
    finally:
        st.stop(remove=False)
        for d in tmps:
            shutil.rmtree(d, ignore_errors=True)
    return out


def ttl_expiry(root: Path, n: int, ttl_ms: int) -> dict[str, Any]:
    st = start(root, [])
    data, tmps = st.tmp / "data", [st.tmp]
    out: dict[str, Any] = {"messages": n, "ttl_ms": ttl_ms}
    try:
        _declare(st, "bench.ttl", {"x-message-ttl": ttl_ms})
        assert st.target.amqp is not None
        publish(st.target.amqp[1], "bench.ttl", range(n))
        filled = time.monotonic()
        st.stop(remove=False, sig=signal.SIGKILL)
        time.sleep(max(0.0, ttl_ms / 1000 - (time.monotonic() - filled)) + 1)
        st = start(root, [], data=data)
        tmps.append(st.tmp)
        longest = 0.0
        while True:
            asked = time.monotonic()
            left = _declare(st, "bench.ttl")
            longest = max(longest, time.monotonic() - asked)
            if not left:
                break
            time.sleep(0.05)
        out.update(ready_s=st.ready_s, cpu_s=cpu(st.target), rss_mb=rss_mb(st.target),
                   longest_declare_s=round(longest, 3))
    finally:
        st.stop(remove=False)
        for d in tmps:
            shutil.rmtree(d, ignore_errors=True)
    return out


def stall(root: Path, n: int) -> dict[str, Any]:
    st = start(root, [])
    data, tmps = st.tmp / "data", [st.tmp]
    out: dict[str, Any] = {"messages": n}
    try:
        assert st.target.amqp is not None
        c = pika.BlockingConnection(pika.ConnectionParameters(*st.target.amqp, heartbeat=0))
        ch = c.channel()
        ch.queue_declare("bench.stall", durable=True)
        ch.confirm_delivery()
        ch.basic_publish("", "bench.stall", b"first", pika.BasicProperties(delivery_mode=2))
        c.close()
        publish(st.target.amqp[1], "bench.stall", range(n), expiration="1")
        st.stop(remove=False, sig=signal.SIGKILL)
        st = start(root, [], data=data)
        tmps.append(st.tmp)
        assert st.target.amqp is not None
        c = pika.BlockingConnection(pika.ConnectionParameters(*st.target.amqp, heartbeat=0))
        ch = c.channel()
        before = cpu(st.target)
        assert ch.basic_get("bench.stall", auto_ack=True)[2] == b"first"
        longest, partway, left = 0.0, 0, n
        while left:
            asked = time.monotonic()
            left = ch.queue_declare("bench.stall", passive=True).method.message_count
            longest = max(longest, time.monotonic() - asked)
            partway += 0 < left < n
        out.update(cpu_s=round(cpu(st.target) - before, 3), longest_rtt_s=round(longest, 3),
                   answers_partway=partway)
        c.close()
    finally:
        st.stop(remove=False)
        for d in tmps:
            shutil.rmtree(d, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.backlog_queues")
    ap.add_argument("--queues", type=int, default=100)
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--ttl-messages", type=int, default=200_000)
    ap.add_argument("--ttl-ms", type=int, default=20_000)
    ap.add_argument("--stall-messages", type=int, default=200_000)
    ap.add_argument("--baseline", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    roots = [Path(__file__).resolve().parent.parent]
    if a.baseline is not None:
        roots.append(a.baseline.resolve())
    runs: list[dict[str, Any]] = []
    for root in roots:
        run = {"build": str(root), "idle_start_cpu_s": idle_start(root),
               "startup": startup(root, a.queues, a.messages),
               "ttl": ttl_expiry(root, a.ttl_messages, a.ttl_ms),
               "stall": stall(root, a.stall_messages)}
        print(json.dumps(run), flush=True)
        runs.append(run)
    if a.json is not None:
        a.json.write_text(json.dumps({"machine": describe(), "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

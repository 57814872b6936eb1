#!/usr/bin/env python3
"""Retries with back-off and a parking lot, done by the broker (RabbitMQ practice, pika).

Topology (every queue durable, every message persistent)::

    publish "attempt.1" ──► [work] (topic)  ──"attempt.*"──►  queue work
                                                              │ worker rejects (requeue=false)
                                                              ▼ x-dead-letter-exchange=retry,
    [retry] (direct) ◄────────────────────────────────────────┘ keeps the routing key
       ├─ "attempt.1" ─► queue work.wait.5000ms  (x-message-ttl 5 s,  dead-letters to work
       │                                           with routing key "attempt.2")
       ├─ "attempt.2" ─► queue work.wait.30000ms (x-message-ttl 30 s, → work "attempt.3")
       └─ "attempt.3" ─► queue work.parking-lot  (kept for a human)

The worker only acks or rejects: the routing key says which attempt a message is on, the
wait queue's ``x-dead-letter-routing-key`` moves it to the next one, and after the last
wait the next reject lands in the parking lot.  Each hop adds to the ``x-death`` header, so
a parked message tells its whole story (queue, reason, count, time per hop).

    python examples/retry_pattern.py --port 5672 --delays 5000,30000 --jobs 5

runs a demo: jobs named ``poison-*`` always fail, ``flaky-*`` fail once, the rest
succeed; it prints one JSON line per event and a summary at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import pika

WORK_EXCHANGE = "work"
RETRY_EXCHANGE = "retry"
WORK_QUEUE = "work"
PARKING_LOT = "work.parking-lot"
PERSISTENT = pika.BasicProperties(delivery_mode=2, content_type="text/plain")


def wait_queue(delay_ms: int) -> str:
    return f"work.wait.{delay_ms}ms"


def declare_topology(ch: Any, delays_ms: list[int]) -> None:
    """Exchanges, the work queue, one wait queue per delay and the parking lot."""
    ch.exchange_declare(WORK_EXCHANGE, "topic", durable=True)
    ch.exchange_declare(RETRY_EXCHANGE, "direct", durable=True)
    ch.queue_declare(WORK_QUEUE, durable=True,
                     arguments={"x-dead-letter-exchange": RETRY_EXCHANGE})
    ch.queue_bind(WORK_QUEUE, WORK_EXCHANGE, "attempt.*")
    for attempt, delay in enumerate(delays_ms, start=1):
        name = wait_queue(delay)
        ch.queue_declare(name, durable=True, arguments={
            "x-message-ttl": delay,
            "x-dead-letter-exchange": WORK_EXCHANGE,
            "x-dead-letter-routing-key": f"attempt.{attempt + 1}"})
        ch.queue_bind(name, RETRY_EXCHANGE, f"attempt.{attempt}")
    ch.queue_declare(PARKING_LOT, durable=True)
    ch.queue_bind(PARKING_LOT, RETRY_EXCHANGE, f"attempt.{len(delays_ms) + 1}")


def publish_job(ch: Any, body: bytes) -> None:
    """A new job starts on attempt 1."""
    ch.basic_publish(WORK_EXCHANGE, "attempt.1", body, PERSISTENT)


def attempt_of(method: Any) -> int:
    return int(method.routing_key.rsplit(".", 1)[-1])


def demo_handler(body: bytes, attempt: int) -> None:
    """Poison jobs always fail; flaky ones fail on their first attempt."""
    name = body.decode()
    if name.startswith("poison") or (name.startswith("flaky") and attempt == 1):
        raise RuntimeError(f"{name} failed on attempt {attempt}")


def run_worker(conn: Any, ch: Any, handler: Callable[[bytes, int], None],
               done: Callable[[], bool], timeout: float,
               emit: Callable[[dict[str, Any]], None]) -> None:
    """Consume the work queue until ``done()`` (or ``timeout`` seconds)."""

    def on_message(chan: Any, method: Any, _props: Any, body: bytes) -> None:
        attempt = attempt_of(method)
        try:
            handler(body, attempt)
        except Exception as exc:
            emit({"event": "failed", "job": body.decode(), "attempt": attempt,
                  "error": str(exc)})
            chan.basic_reject(method.delivery_tag, requeue=False)  # -> DLX "retry"
            return
        emit({"event": "done", "job": body.decode(), "attempt": attempt})
        chan.basic_ack(method.delivery_tag)

    ch.basic_qos(prefetch_count=10)
    tag = ch.basic_consume(WORK_QUEUE, on_message)
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    ch.basic_cancel(tag)


def parked(ch: Any) -> list[dict[str, Any]]:
    """Take the parking lot's messages, with the story their x-death header tells."""
    out: list[dict[str, Any]] = []
    while True:
        method, props, body = ch.basic_get(PARKING_LOT)
        if method is None:
            return out
        history = [{"queue": d["queue"], "reason": d["reason"], "count": d["count"]}
                   for d in (props.headers or {}).get("x-death", [])]
        out.append({"job": body.decode(), "x-death": history,
                    "first_death_queue": (props.headers or {}).get("x-first-death-queue")})
        ch.basic_ack(method.delivery_tag)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=5672)
    ap.add_argument("--delays", default="5000,30000", help="wait-queue TTLs in ms")
    ap.add_argument("--jobs", type=int, default=3, help="jobs of each kind in the demo")
    ap.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args(argv)
    delays = [int(d) for d in args.delays.split(",") if d]

    def emit(event: dict[str, Any]) -> None:
        print(json.dumps(event), flush=True)

    conn = pika.BlockingConnection(pika.ConnectionParameters(args.host, args.port))
    ch = conn.channel()
    declare_topology(ch, delays)
    ch.confirm_delivery()
    jobs = [f"{kind}-{i}" for kind in ("ok", "flaky", "poison") for i in range(args.jobs)]
    for job in jobs:
        publish_job(ch, job.encode())
    done_jobs: set[str] = set()
    poison = {j for j in jobs if j.startswith("poison")}

    def record(event: dict[str, Any]) -> None:
        if event["event"] == "done":
            done_jobs.add(event["job"])
        emit(event)

    def finished() -> bool:
        if len(done_jobs) < len(jobs) - len(poison):
            return False
        count = ch.queue_declare(PARKING_LOT, durable=True, passive=True).method.message_count
        return bool(count >= len(poison))

    run_worker(conn, ch, demo_handler, finished, args.timeout, record)
    lot = parked(ch)
    for item in lot:
        emit({"event": "parked", **item})
    emit({"event": "summary", "done": sorted(done_jobs), "parked": sorted(i["job"] for i in lot)})
    conn.close()
    ok = sorted(i["job"] for i in lot) == sorted(poison)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Resource alarms and commit failures seen by pika clients (RabbitMQ "alarms" doc)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

import pika
from pika.exceptions import AMQPConnectionError, AMQPError, NackError

from tests.amqp.conftest import params, wait_until


def status(srv: Any) -> dict[str, Any]:
    return json.loads(srv.cli("status", "--json").stdout)


def test_memory_alarm_blocks_publisher_until_consumers_drain(start_server: Any) -> None:
    """alarms: "Memory Alarms" + "Client Notifications" (connection.blocked): a publisher
    that fills memory past the watermark is blocked (connection.blocked, its socket no
    longer read); a consumer drains the queue; the freed memory goes back to the kernel
    (malloc_trim), the alarm clears, the publisher hears connection.unblocked and its next
    publish is confirmed."""
    # The flood overshoots the default 64 MiB per-queue byte cap before the alarm's next
    # sample: this test is about the alarm, so the cap is out of its way.
    srv = start_server("--amqp-queue-bytes", "1GiB")
    rss_mb = status(srv)["alarms"]["rss_mb"]
    srv.cli("limits", "--memory-high-watermark", f"{int(rss_mb) + 40}MB")
    assert not status(srv)["alarms"]["memory_alarm"]

    pub = pika.BlockingConnection(params(srv.amqp_port, blocked_connection_timeout=120))
    events: list[str] = []
    pub.add_on_connection_blocked_callback(lambda _c, m: events.append(m.method.reason))
    pub.add_on_connection_unblocked_callback(lambda _c, _m: events.append("unblocked"))
    pch = pub.channel()
    pch.queue_declare("flood")
    body = os.urandom(64 * 1024)
    sent = 0
    deadline = time.monotonic() + 60
    while not events:
        assert time.monotonic() < deadline and sent < 6000, "the memory alarm never fired"
        for _ in range(16):  # ~1 MB, then let pika read what the server said
            pch.basic_publish("", "flood", body)
        sent += 16
        pub.process_data_events(time_limit=0.02)
    assert "memory" in events[0]
    assert status(srv)["alarms"]["memory_alarm"] is True

    # A consumer-only connection keeps working while the publisher is blocked.
    cons = pika.BlockingConnection(params(srv.amqp_port))
    cch = cons.channel()
    drained = 0

    def on_message(_c: Any, _m: Any, _p: Any, _b: bytes) -> None:
        nonlocal drained
        drained += 1

    cch.basic_consume("flood", on_message, auto_ack=True)
    deadline = time.monotonic() + 60
    while "unblocked" not in events:
        assert time.monotonic() < deadline, f"still blocked after draining {drained}"
        cons.process_data_events(time_limit=0.05)
        pub.process_data_events(time_limit=0.01)
    assert drained > 0
    alarms = status(srv)["alarms"]
    assert alarms["memory_alarm"] is False and alarms["malloc_trims"] >= 1
    # The publisher resumes: what it sent while blocked arrives, and a new publish is
    # confirmed.
    pch.confirm_delivery()
    pch.basic_publish("", "flood", b"after the alarm")
    wait_until(cons, lambda: drained == sent + 1, timeout=30)
    pub.close()
    cons.close()


def test_disk_full_never_confirms_then_restarts_and_recovers(start_server: Any,
                                                             small_tmpfs: Any) -> None:
    """alarms: "Disk Alarms" — and past the free-disk limit, a real ENOSPC on commit: no
    publish is ever confirmed once a commit failed (basic.nack or a closed connection,
    never basic.ack); the server then exits with status 3 (crash-only, issue 13) and, once
    space is freed, the restarted server delivers every confirmed message."""
    mnt = small_tmpfs("24m")
    # The free-disk limit is set below anything, so the commit itself hits ENOSPC (a full
    # disk the alarm did not catch). The backlog budget (by default half of this 24 MiB
    # filesystem) is lifted: at it the queue would drop its oldest, as documented.
    unbounded = ("--disk-free-limit", "1", "--max-backlog-bytes", "1GB")
    srv = start_server(*unbounded, data=mnt / "data")
    c = pika.BlockingConnection(params(srv.amqp_port))
    ch = c.channel()
    ch.queue_declare("full", durable=True)
    ch.confirm_delivery()
    persistent = pika.BasicProperties(delivery_mode=2)
    acked: list[int] = []
    failures = 0
    for i in range(2000):
        try:
            ch.basic_publish("", "full", b"%d:" % i + os.urandom(48 * 1024), persistent)
            assert failures == 0, "a publish was confirmed after a failed commit"
            acked.append(i)
        except NackError:
            failures += 1
        except (AMQPConnectionError, AMQPError):
            failures += 1
            break
        if failures >= 5:
            break
    assert failures, "the disk never filled"
    assert acked
    assert srv.proc.wait(15) == 3, "the server must exit after a failed commit"
    assert any(ln.startswith("oxiedge: storage failure:") for ln in srv.log_lines)
    # The operator frees space; the restart (systemd's) recovers what was confirmed.
    subprocess.run(["mount", "-o", "remount,size=96m", str(mnt)], check=True)
    again = start_server(*unbounded, data=mnt / "data")
    cons = pika.BlockingConnection(params(again.amqp_port))
    cch = cons.channel()
    got: list[int] = []
    cch.basic_consume("full", lambda _c, _m, _p, b: got.append(int(b.split(b":")[0])),
                      auto_ack=True)
    wait_until(cons, lambda: len(got) >= len(acked), timeout=30)
    assert set(acked) <= set(got)
    cons.close()

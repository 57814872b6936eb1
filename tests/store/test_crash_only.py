"""Crash-only on storage failure: a real ``oxiedge serve`` whose WAL sync fails.

The fault is injected in the real committer's sync thread (``OXIEDGE_TEST_SYNC_EIO_AFTER``,
committer.py): after N good syncs the next ``flush_wal`` raises ``OSError(EIO)``, as a disk
that lost a write reports it. The server must fail that round's waiters (no PUBACK / no
confirm), log one ``oxiedge: storage failure:`` line, stop feeding the watchdog and exit
with status 3 within a few seconds; the next start recovers everything acknowledged.
(The full-disk variant, a real ENOSPC, is tests/amqp/test_alarms.py.)
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pika
import pytest
from pika.exceptions import AMQPConnectionError, AMQPError, NackError

from oxiedge.mqtt.codec import encode
from oxiedge.mqtt.packets import Puback, Publish
from oxiedge.server import EXIT_STORAGE_FAILURE
from tests.mqtt.rawclient import RawSession, offline_subscriber

FAIL_AFTER = 12
LINE = "oxiedge: storage failure: durable writes stopped"


def wait_exit(srv: Any, timeout: float = 10.0) -> int:
    """The server's exit status; fails if it is still running after ``timeout`` s."""
    try:
        return int(srv.proc.wait(timeout))
    except Exception:
        raise AssertionError("the server kept running after a failed commit:\n"
                             + "\n".join(srv.log_lines)) from None


def notify_socket(tmp_path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.settimeout(0.2)
    return sock


def datagrams(sock: socket.socket) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(sock.recv(4096))
        except (TimeoutError, BlockingIOError):
            return out


def test_mqtt_sync_eio_exits_without_acknowledging(start_server: Any, tmp_path: Path) -> None:
    manager = notify_socket(tmp_path)
    env = {"OXIEDGE_TEST_SYNC_EIO_AFTER": str(FAIL_AFTER),
           "NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "200000"}
    srv = start_server("--amqp-port", "off", env=env)
    # A persistent QoS 1 subscriber, offline: every QoS 1 publish is a durable write.
    offline_subscriber(srv.mqtt_port, "keeper", "t/#")
    pub = RawSession(srv.mqtt_port)
    pub.connect("writer")
    acked: list[int] = []
    failed_at = None
    for i in range(1, 3 * FAIL_AFTER):
        pub.send(encode(Publish("t/x", b"m%d" % i, 1, False, False, i)))
        try:
            reply = pub.next(timeout=10)
        except (ConnectionError, TimeoutError, OSError):
            failed_at = i
            break
        assert isinstance(reply, Puback) and reply.packet_id == i, reply
        acked.append(i)
    assert failed_at is not None, "the injected EIO never failed a round"
    assert len(acked) < FAIL_AFTER
    # The failed publish got no PUBACK: the connection closed instead.
    assert wait_exit(srv) == EXIT_STORAGE_FAILURE
    failure = [ln for ln in srv.log_lines if ln.startswith(LINE)]
    assert len(failure) == 1, srv.log_lines
    assert "Input/output error" in failure[0]
    # The watchdog was fed before the failure and never after it (STATUS is sent when the
    # failure is noticed; no WATCHDOG=1 may follow).
    sent = datagrams(manager)
    manager.close()
    status_at = next(i for i, d in enumerate(sent) if d.startswith(b"STATUS=storage failure"))
    assert b"WATCHDOG=1" in sent[:status_at]
    assert b"WATCHDOG=1" not in sent[status_at:], sent[status_at:]

    # Restart (what systemd does): recovery delivers every acknowledged message.
    again = start_server("--amqp-port", "off", data=srv.data)
    sub = RawSession(again.mqtt_port)
    sub.connect("keeper", clean=False, expect=b"\x20\x02\x01\x00")  # session present
    got: list[int] = []
    while len(got) <= len(acked):
        try:
            msg = sub.next(timeout=3)
        except TimeoutError:
            break
        assert isinstance(msg, Publish) and msg.qos == 1, msg
        sub.send(encode(Puback(msg.packet_id or 0)))
        got.append(int(msg.payload[1:]))
    assert set(acked) <= set(got), (acked, got)
    # The failed round may or may not have reached the disk; nothing else is invented.
    assert set(got) <= set(acked) | {failed_at}
    sub.disconnect()


def test_amqp_sync_eio_never_confirms(start_server: Any) -> None:
    srv = start_server("--mqtt-port", "off",
                       env={"OXIEDGE_TEST_SYNC_EIO_AFTER": str(FAIL_AFTER)})
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", srv.amqp_port))
    ch = conn.channel()
    ch.queue_declare("kept", durable=True)
    ch.confirm_delivery()
    confirmed: list[int] = []
    failed = False
    for i in range(3 * FAIL_AFTER):
        try:
            ch.basic_publish("", "kept", b"%d" % i, pika.BasicProperties(delivery_mode=2))
        except (NackError, AMQPConnectionError, AMQPError):
            failed = True
            break
        assert not failed
        confirmed.append(i)
    assert failed, "the injected EIO never failed a round"
    assert len(confirmed) < FAIL_AFTER
    # After a nack nothing more may be confirmed, even before the process is gone.
    if conn.is_open:
        with pytest.raises((NackError, AMQPConnectionError, AMQPError)):
            ch.basic_publish("", "kept", b"late", pika.BasicProperties(delivery_mode=2))
    assert wait_exit(srv) == EXIT_STORAGE_FAILURE
    assert sum(ln.startswith(LINE) for ln in srv.log_lines) == 1, srv.log_lines

    again = start_server("--mqtt-port", "off", data=srv.data)
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", again.amqp_port))
    ch = conn.channel()
    bodies = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        method, _props, body = ch.basic_get("kept", auto_ack=True)
        if method is None:
            break
        bodies.append(int(body))
    conn.close()
    assert set(confirmed) <= set(bodies), (confirmed, bodies)
    assert len(bodies) <= len(confirmed) + 1

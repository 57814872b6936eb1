"""sd_notify client against a real AF_UNIX datagram socket standing in for systemd."""

from __future__ import annotations

import itertools
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from oxiedge import sdnotify


@pytest.fixture
def manager_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A bound datagram socket whose path is exported as NOTIFY_SOCKET."""
    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    yield sock
    sock.close()


def test_ready_sends_ready_1(manager_socket: socket.socket) -> None:
    assert sdnotify.ready() is True
    assert manager_socket.recv(4096) == b"READY=1"


def test_ready_with_status_is_one_datagram(manager_socket: socket.socket) -> None:
    assert sdnotify.ready("MQTT on 1883\nAMQP on 5672")
    assert manager_socket.recv(4096) == b"READY=1\nSTATUS=MQTT on 1883 AMQP on 5672"


def test_stopping_watchdog_status(manager_socket: socket.socket) -> None:
    assert sdnotify.stopping()
    assert sdnotify.watchdog()
    assert sdnotify.status("recovering 12 queues")
    assert manager_socket.recv(4096) == b"STOPPING=1"
    assert manager_socket.recv(4096) == b"WATCHDOG=1"
    assert manager_socket.recv(4096) == b"STATUS=recovering 12 queues"


def test_abstract_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"oxiedge-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(b"\0" + name.encode())
        sock.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert sdnotify.ready()
        assert sock.recv(4096) == b"READY=1"


def test_noop_without_notify_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sdnotify.ready() is False
    assert sdnotify.watchdog() is False
    assert sdnotify.stopping() is False
    assert sdnotify.status("x") is False


def test_dead_manager_is_not_fatal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens"))
    assert sdnotify.ready() is False


def test_watchdog_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    assert sdnotify.watchdog_interval() is None
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    assert sdnotify.watchdog_interval() == 30.0
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert sdnotify.watchdog_interval() == 30.0
    # The variables were inherited from a parent that the manager actually watches.
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))
    assert sdnotify.watchdog_interval() is None
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    for bad in ("0", "-5", "abc"):
        monkeypatch.setenv("WATCHDOG_USEC", bad)
        assert sdnotify.watchdog_interval() is None


async def test_watchdog_loop_pings_at_half_interval(
    manager_socket: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "200000")  # 0.2 s -> a ping every 0.1 s
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    manager_socket.setblocking(False)
    receiver = trio.socket.from_stdlib_socket(manager_socket)
    pings: list[float] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sdnotify.watchdog_loop)
            while len(pings) < 4:
                assert await receiver.recv(4096) == b"WATCHDOG=1"
                pings.append(trio.current_time())
            nursery.cancel_scope.cancel()
    gaps = [b - a for a, b in itertools.pairwise(pings)]
    # Half of 0.2 s; generous upper bound for a loaded 2-core machine.
    assert all(0.08 <= gap < 1.0 for gap in gaps), gaps


async def test_watchdog_loop_returns_without_watchdog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    with trio.fail_after(2):
        await sdnotify.watchdog_loop()


async def test_watchdog_loop_stops_pinging_while_unhealthy(
    manager_socket: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``healthy`` False (a failed or hung WAL sync): no ping, so systemd restarts us."""
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    manager_socket.setblocking(False)
    receiver = trio.socket.from_stdlib_socket(manager_socket)
    healthy = [True]
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sdnotify.watchdog_loop, lambda interval: healthy[0])
            assert await receiver.recv(4096) == b"WATCHDOG=1"
            healthy[0] = False
            await trio.sleep(0.15)  # a ping already under way may still arrive
            while True:
                try:
                    manager_socket.recv(4096)
                except BlockingIOError:
                    break
            with trio.move_on_after(0.6) as quiet:
                await receiver.recv(4096)
            assert quiet.cancelled_caught, "a ping was sent while unhealthy"
            nursery.cancel_scope.cancel()

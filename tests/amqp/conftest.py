"""AMQP test helpers on top of the project-wide ``start_server`` fixture.

``server`` is overridden here with a MODULE-scoped server: the interop tests use distinct
queue/exchange names, so sharing one process per module saves a server start per test
(the suite's budget is ~2 minutes on 2 busy cores).  Tests that restart, kill or
reconfigure a server use ``start_server`` and get their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pika
import pytest

from tests.conftest import ServerProcess


def params(port: int, **kw: Any) -> pika.ConnectionParameters:
    """pika parameters for a local oxiedge (short timeouts so a hang fails fast)."""
    kw.setdefault("blocked_connection_timeout", 10)
    kw.setdefault("socket_timeout", 5)
    kw.setdefault("connection_attempts", 1)
    return pika.ConnectionParameters("127.0.0.1", port, **kw)


def wait_until(conn: Any, cond: Any, timeout: float = 10) -> None:
    """Process pika events until ``cond()`` holds (bounded: a hang fails)."""
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        conn.process_data_events(time_limit=0.05)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One ready server (MQTT and AMQP on free ports) shared by a test module."""
    srv = ServerProcess(tmp_path_factory.mktemp("amqp") / "data", (), None)
    srv.start()
    yield srv
    if srv.proc is not None and srv.proc.poll() is None:
        srv.proc.kill()
        srv.proc.wait(10)


@pytest.fixture
def conn(server: Any) -> Iterator[pika.BlockingConnection]:
    """A pika BlockingConnection to a fresh server."""
    c = pika.BlockingConnection(params(server.amqp_port))
    yield c
    if c.is_open:
        c.close()


@pytest.fixture
def ch(conn: pika.BlockingConnection) -> Any:
    return conn.channel()

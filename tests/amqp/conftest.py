"""AMQP test helpers on top of the project-wide ``start_server`` fixture.

``server`` is overridden here with a MODULE-scoped server: the interop tests use distinct
queue/exchange names, so sharing one process per module saves a server start per test
(the suite's budget is ~2 minutes on 2 busy cores).  Tests that restart, kill or
reconfigure a server use ``start_server`` and get their own.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from oxiedge.amqp.service import AmqpService
from oxiedge.app import App
from oxiedge.auth import UserStore
from oxiedge.config import Config
from oxiedge.store import Store
from tests.conftest import ServerProcess


def params(port: int, **kw: Any) -> pika.ConnectionParameters:
    """pika parameters for a local oxiedge (short timeouts so a hang fails fast)."""
    kw.setdefault("blocked_connection_timeout", 10)
    kw.setdefault("socket_timeout", 5)
    kw.setdefault("connection_attempts", 1)
    return pika.ConnectionParameters("127.0.0.1", port, **kw)


@asynccontextmanager
async def amqp_service(tmp_path: Path, **cfg: Any) -> AsyncIterator[AmqpService]:
    """An in-process, recovered ``AmqpService`` on a running store in ``tmp_path`` (no
    listener); ``cfg`` overrides :class:`Config` fields."""
    store = Store.open(tmp_path / "db")
    try:
        async with store.running():
            app = App(config=Config(data=tmp_path, **cfg), store=store,
                      users=UserStore.load(None, True))
            svc = AmqpService(app)
            await svc.recover()
            yield svc
    finally:
        store.close()


def connect(srv: Any) -> pika.BlockingConnection:
    """A pika BlockingConnection to ``srv``."""
    return pika.BlockingConnection(params(srv.amqp_port))


def bodies(ch: Any, queue: str) -> list[bytes]:
    """Every ready message of ``queue`` (basic.get, auto-ack), as bodies."""
    out: list[bytes] = []
    while (got := ch.basic_get(queue, auto_ack=True))[0] is not None:
        out.append(got[2])
    return out


def cli_rows(srv: Any, *cmd: str) -> list[dict[str, Any]]:
    """``oxiedge CMD --json`` (live, or offline on the data dir) as parsed rows."""
    return [json.loads(line) for line in srv.cli(*cmd, "--json").stdout.splitlines() if line]


def wait_until(conn: Any, cond: Any, timeout: float = 10) -> None:
    """Process pika events until ``cond()`` holds (bounded: a hang fails)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        conn.process_data_events(time_limit=0.05)


def wait_queue_gone(conn: Any, queue: str, timeout: float, poll: float, why: str) -> None:
    """Probe ``queue`` with passive declares (a channel each) until one gets 404; fail
    with ``why`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        probe = conn.channel()
        try:
            probe.queue_declare(queue, passive=True)
        except ChannelClosedByBroker as exc:
            assert exc.reply_code == 404
            return
        probe.close()
        assert time.monotonic() < deadline, why
        conn.process_data_events(time_limit=poll)


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
    c = connect(server)
    yield c
    if c.is_open:
        c.close()


@pytest.fixture
def ch(conn: pika.BlockingConnection) -> Any:
    return conn.channel()

"""AMQP test helpers on top of the project-wide ``server`` / ``start_server`` fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pika
import pytest


def params(port: int, **kw: Any) -> pika.ConnectionParameters:
    """pika parameters for a local oxiedge (short timeouts so a hang fails fast)."""
    kw.setdefault("blocked_connection_timeout", 10)
    kw.setdefault("socket_timeout", 5)
    kw.setdefault("connection_attempts", 1)
    return pika.ConnectionParameters("127.0.0.1", port, **kw)


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

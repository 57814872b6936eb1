"""Real upstream brokers for the uplink tests, started from Debian's packages on loopback.

``rabbit``: one RabbitMQ node (plain AMQP + AMQPS with a test CA) shared by the session;
``mosquitto``: one Mosquitto (plain + TLS) per module. Tests that stop/restart an upstream
start their own with ``Rabbit.start`` / ``Mosquitto.start``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def rabbit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from .rabbit import Rabbit

    node = Rabbit.start(Path(tmp_path_factory.mktemp("rabbit")), tls=True)
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="module")
def mosquitto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from .mosquitto import Mosquitto

    node = Mosquitto.start(Path(tmp_path_factory.mktemp("mosquitto")), tls=True)
    try:
        yield node
    finally:
        node.stop()

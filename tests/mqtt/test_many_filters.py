"""A SUBSCRIBE with more filters than fit a one-byte remaining length gets a valid SUBACK."""

from __future__ import annotations

from collections.abc import Callable

from tests.conftest import ServerProcess

from .conftest import Client


def test_subscribe_with_200_filters(server: ServerProcess, clients: Callable[..., Client]) -> None:
    c = clients(server.mqtt_port, "many-filters")
    c.connect()
    granted = c.subscribe(*[(f"many/{i}", 1) for i in range(200)])
    c.disconnect()
    assert granted == [1] * 200

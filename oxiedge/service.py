"""What a protocol broker provides to ``oxiedge serve`` (see ``server.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import trio


class Service(Protocol):
    """One broker (MQTT or AMQP) inside the oxiedge process."""

    name: str

    async def recover(self) -> None:
        """Load durable state; runs before any listener opens."""

    def listening_suffix(self) -> str:
        """Text appended to the ``<NAME> listening on HOST:PORT`` line."""

    def extra_lines(self) -> list[str]:
        """Start-up lines printed right after the listening line."""

    async def run(
        self,
        listeners: list[trio.abc.Listener[Any]],
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept and serve connections until cancelled (TCP, and TLS: ``tls.TlsListener``)."""

    def admin_handlers(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        """Admin operations (name → handler taking the request args; may be async)."""

    def status(self) -> dict[str, Any]:
        """Counters and gauges for ``oxiedge status``."""

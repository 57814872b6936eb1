"""What :class:`~oxiedge.amqp.protocol.AmqpProtocol` is given by its binding: explicit limit
values (:class:`ConnectionLimits`, built from the configuration by ``service.py``) and the
typing protocols of the objects around it (the transport, the resource alarms).

A leaf module: the sans-IO protocol imports neither the configuration nor the application,
nor ``oxiedge.alarms`` (which loads the transport's blocked-connection watch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The bounds of one connection (``docs/amqp.md``, the ``--amqp-*`` options)."""

    #: --amqp-handshake-timeout: from the accept (TLS included) to connection.open-ok.
    handshake_timeout: float = 10.0
    #: Offered in connection.tune; the client may lower frame_max and channel_max.
    frame_max: int = 131072
    channel_max: int = 2047
    heartbeat: int = 60  # offered; the client's tune-ok choice wins
    #: Bytes of one frame before the login (the start-ok with its client properties).
    preauth_max_size: int = 64 << 10
    #: A content header announcing more is refused with 406 (--amqp-max-message-size).
    max_message_size: int = 16 << 20
    max_consumers: int = 1000  # per connection
    max_queues: int = 1000  # live queues one connection created
    #: Unacked deliveries per channel never exceed this, prefetch or not.
    unacked_limit: int = 100_000


class Outlet(Protocol):
    """The transport as the protocol sees it (``oxiedge.net.loop.Transport``)."""

    out_bytes: int

    def write(self, data: bytes) -> None: ...

    def deliver_now(self) -> None:
        """Send what this burst wrote to other connections so far, now."""


class Alarms(Protocol):
    """The resource alarms as the protocol sees them (``oxiedge.alarms.ResourceAlarms``)."""

    @property
    def blocked(self) -> bool: ...

    @property
    def reason(self) -> str: ...

    def subscribe(self, listener: Callable[[bool, str], None]) -> Callable[[], None]:
        """Call ``listener(blocked, reason)`` on every change; returns an unsubscribe."""

"""What :class:`~oxiedge.amqp.protocol.AmqpProtocol` is given by its binding: explicit limit
values (:class:`ConnectionLimits`, built from the configuration by ``service.py``) and the
typing protocols of the objects around it (the transport, the resource alarms); and what
its channels see of it (:class:`ChannelOwner`).

A leaf module: the sans-IO protocol imports neither the configuration nor the application,
nor ``oxiedge.alarms`` (which loads the transport's blocked-connection watch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from oxiedge.access.grants import Grants
    from oxiedge.access.rules import PermissionStore
    from oxiedge.amqp.bounds import ConnectionBounds
    from oxiedge.amqp.broker import Broker
    from oxiedge.amqp.queues import Queue


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
    #: What one transaction may hold (``transaction.py``): publishes plus settled tags,
    #: and the held publishes' bytes (--amqp-tx-max-messages / --amqp-tx-max-bytes).
    tx_max_messages: int = 10_000
    tx_max_bytes: int = 64 << 20


class Outlet(Protocol):
    """The connection's output as the protocol sees it (``oxiedge.net.output.Output``)."""

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


class ChannelOwner(Protocol):
    """What a channel (its consumers, its handlers) needs of its connection
    (``AmqpProtocol`` is the one there is)."""

    broker: Broker
    grants: Grants | None
    perms: PermissionStore
    frame_max: int
    unacked_limit: int
    cancel_notify: bool
    closed: bool
    delivered: int
    bounds: ConnectionBounds
    exclusive_queues: dict[str, Queue]

    @property
    def user(self) -> str:
        """The connection's user name."""

    @property
    def writable(self) -> bool:
        """Room in the output (else consumers are skipped until it drains)."""

    def send(self, data: bytes) -> None:
        """Output a frame (never blocks)."""

    def note_staged(self) -> None:
        """A delivery staged a durable delete (synced before close-ok)."""

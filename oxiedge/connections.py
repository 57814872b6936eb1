"""Connection limits shared by every listener: total and per source address.

Every listener runs its connection handler inside ``ConnectionLimits.guard``: the guard
counts the connection against ``--max-connections`` (all protocols together) and
``--max-connections-per-source`` (one remote address; IPv4-mapped IPv6 counts as the IPv4
address, other IPv6 addresses by their /64), and a connection over either bound is closed at
once, before a byte is read (cheapest for the broker during a flood; the client sees a
closed connection, as with Mosquitto's ``max_connections``). Refusals are counted and logged
at most once per ``LOG_EVERY`` seconds so a flood does not flood the journal.

The guard also sets ``PEER`` (the source address) for the handler's task, which is how
``oxiedge.login`` slows failed logins per source without the protocol code passing it.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import trio

from .tls import transport_socket

#: The source address of the connection the current task serves ("" outside a connection).
PEER: ContextVar[str] = ContextVar("oxiedge_peer", default="")
LOG_EVERY = 10.0

Handler = Callable[[trio.abc.Stream], Awaitable[None]]


def source_of(stream: trio.abc.Stream) -> str:
    """The remote address of a plain or TLS stream (the TLS handshake has not run yet)."""
    sock = transport_socket(stream)
    try:
        host = str(sock.getpeername()[0]) if sock is not None else "?"
    except (OSError, IndexError, TypeError):
        return "?"
    if host.startswith("::ffff:"):
        return host[7:]
    if ":" in host:
        # One IPv6 host usually holds a whole /64: count it as one source.
        try:
            return str(ipaddress.ip_network(host.split("%")[0] + "/64", strict=False))
        except ValueError:
            return host
    return host


class ConnectionLimits:
    """Open connections in total and per source address (see the module docstring)."""

    def __init__(self, max_total: int, max_per_source: int, log: Any = None) -> None:
        self.max_total = max_total
        self.max_per_source = max_per_source
        self.log = log
        self.open = 0
        self.peak = 0
        self.accepted = 0
        self.by_source: dict[str, int] = {}
        self.refused_total = 0  # over --max-connections
        self.refused_per_source = 0  # over --max-connections-per-source
        self._logged = 0.0

    def admit(self, source: str) -> str | None:
        """Count a new connection from ``source``; returns why it is refused, or None."""
        if self.open >= self.max_total:
            self.refused_total += 1
            return f"{self.open} connections open (--max-connections {self.max_total})"
        if self.by_source.get(source, 0) >= self.max_per_source:
            self.refused_per_source += 1
            return (f"{self.by_source[source]} connections open from {source} "
                    f"(--max-connections-per-source {self.max_per_source})")
        self.open += 1
        self.accepted += 1
        self.peak = max(self.peak, self.open)
        self.by_source[source] = self.by_source.get(source, 0) + 1
        return None

    def release(self, source: str) -> None:
        self.open -= 1
        left = self.by_source.get(source, 1) - 1
        if left > 0:
            self.by_source[source] = left
        else:
            self.by_source.pop(source, None)

    def guard(self, handler: Handler, label: str) -> Handler:
        """``handler`` wrapped: refused over a bound, counted, ``PEER`` set."""

        async def guarded(stream: trio.abc.Stream) -> None:
            source = source_of(stream)
            why = self.admit(source)
            if why is not None:
                now = time.monotonic()
                if self.log is not None and now - self._logged >= LOG_EVERY:
                    self._logged = now
                    self.log.warning("%s: refusing connections from %s: %s", label, source, why)
                await trio.aclose_forcefully(stream)
                return
            PEER.set(source)
            try:
                await handler(stream)
            finally:
                self.release(source)

        return guarded

    def status(self) -> dict[str, Any]:
        return {
            "open": self.open,
            "peak": self.peak,
            "accepted": self.accepted,
            "sources": len(self.by_source),
            "max_connections": self.max_total,
            "max_per_source": self.max_per_source,
            "refused_max_connections": self.refused_total,
            "refused_max_per_source": self.refused_per_source,
        }

"""Connection limits shared by every listener: total and per source address.

Every listener runs its connection handler inside ``ConnectionLimits.guard``: the guard
counts the connection against ``--max-connections`` (all protocols together) and
``--max-connections-per-source`` (one remote address; IPv4-mapped IPv6 counts as the IPv4
address, other IPv6 addresses by their /64). A connection counts until its handler has
finished, cleanup included: the bound caps what the broker holds, and a connection being torn
down still holds it.

That makes a client that closes and at once reconnects at the bound race its own cleanup:
the new connection can be accepted before the broker has read the close of the old one
(Mosquitto's ``01-connect-max-connections`` reconnects 10 clients at a bound of 10 within a
millisecond). So a new connection over a bound does not give up at once: it waits up to
``GRACE`` seconds for a slot to be released, re-checking at each release, without reading a
byte. At most ``MAX_WAITING`` connections wait at once (all listeners together); beyond them,
and when the grace runs out, the connection is closed before a byte is read, as before
(cheapest for the broker during a flood: a flood at the bound holds at most ``MAX_WAITING``
extra accepted sockets for ``GRACE`` seconds; the client sees a closed connection, as with
Mosquitto's ``max_connections``). The per-source bound waits the same way. Refusals are
counted once per connection and logged at most once per ``LOG_EVERY`` seconds so a flood
does not flood the journal; ``admitted_after_wait`` counts the connections the grace let in,
``waiting`` / ``waiting_peak`` show the waiters.

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
#: How long a connection over a bound waits for a slot to be released before it is refused.
GRACE = 0.1
#: How many connections may wait for a slot at once; any further one is refused at once.
MAX_WAITING = 16

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
        self.waiting = 0  # connections over a bound waiting for a slot (at most MAX_WAITING)
        self.waiting_peak = 0
        self.admitted_after_wait = 0
        self._released = trio.Event()  # set (and replaced) whenever a slot is released
        self._logged = 0.0

    def _over(self, source: str) -> str | None:
        """Which bound a new connection from ``source`` is over now, or None."""
        if self.open >= self.max_total:
            return "total"
        if self.by_source.get(source, 0) >= self.max_per_source:
            return "source"
        return None

    def _refuse(self, over: str, source: str) -> str:
        """Count a refusal over bound ``over``; returns why, for the log."""
        if over == "total":
            self.refused_total += 1
            return f"{self.open} connections open (--max-connections {self.max_total})"
        self.refused_per_source += 1
        return (f"{self.by_source.get(source, 0)} connections open from {source} "
                f"(--max-connections-per-source {self.max_per_source})")

    def admit(self, source: str) -> str | None:
        """Count a new connection from ``source``; returns why it is refused, or None."""
        over = self._over(source)
        if over is not None:
            return self._refuse(over, source)
        self._count(source)
        return None

    async def admit_within_grace(self, source: str) -> str | None:
        """``admit``, but over a bound wait up to ``GRACE`` for a slot if fewer than
        ``MAX_WAITING`` connections already wait (see the module docstring)."""
        over = self._over(source)
        if over is not None and self.waiting < MAX_WAITING:
            self.waiting += 1
            self.waiting_peak = max(self.waiting_peak, self.waiting)
            try:
                with trio.move_on_after(GRACE):
                    while over is not None:
                        await self._released.wait()
                        over = self._over(source)
            finally:
                self.waiting -= 1
            if over is None:
                self.admitted_after_wait += 1
        return self.admit(source)  # (no await since the last check: the same answer)

    def _count(self, source: str) -> None:
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
        self._released.set()
        self._released = trio.Event()

    def guard(self, handler: Handler, label: str) -> Handler:
        """``handler`` wrapped: refused over a bound, counted, ``PEER`` set."""

        async def guarded(stream: trio.abc.Stream) -> None:
            source = source_of(stream)
            try:
                why = await self.admit_within_grace(source)
            except BaseException:  # cancelled while waiting (shutdown): close, not leak
                await trio.aclose_forcefully(stream)
                raise
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
            "waiting": self.waiting,
            "waiting_peak": self.waiting_peak,
            "admitted_after_wait": self.admitted_after_wait,
        }

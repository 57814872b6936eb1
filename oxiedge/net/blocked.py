"""Waiting out a resource alarm without losing sight of the peer.

Theory of operation
-------------------
While an alarm is on (``oxiedge.alarms``) a publishing connection's protocol answers
``BLOCKED`` and the transport loop stops reading its socket: its input waits in the
kernel, unread, so TCP pushes back on the client. But a connection that is not read
does not see its peer go either - ``recv`` returning ``b""`` is the only way a reader
learns of a FIN - so a client that hung up (or died) while blocked used to linger until
the alarm cleared: its connection slot (``--max-connections``, per source), channels,
exclusive queues, MQTT session and will with it. ``BlockedWatch.wait`` awaits the alarm and,
at the same time, watches the socket for the hang-up **without reading it**:

* **The watch.** A small epoll of its own holds the socket for ``EPOLLRDHUP |
  EPOLLHUP | EPOLLERR`` only (not ``EPOLLIN``: input keeps arriving and must not wake
  us). ``EPOLLRDHUP`` is the peer's FIN, reported while unread data is still buffered
  before it; ``EPOLLHUP``/``EPOLLERR`` a reset or a timed-out connection. An epoll
  descriptor is itself pollable, so the task waits for it in trio like for any socket
  (``wait_readable``): nothing runs while nothing happens, whatever the number of
  blocked connections; the cost is one descriptor per blocked connection, for as long
  as it is blocked. Where epoll is missing or refused (``EMFILE``), ``poll(2)`` on the
  socket once every ``HANGUP_POLL_INTERVAL`` does the same.
* **A peer that vanished without a FIN** (power cut, cable, a NAT that forgot us) sends
  nothing, and a blocked connection has no keep-alive or heartbeat deadline: its
  client's PINGREQs and heartbeats sit unread in the buffer, so the protocols suspend
  that deadline while blocked (a healthy blocked client must not be dropped for silence
  we imposed). So while blocked the socket gets TCP keep-alive probes
  (``--blocked-keepalive``, default 60,20,3: first after 60 s without any segment from
  the peer, then every 20 s, 3 unanswered: a dead peer is noticed ~2 minutes after its
  last segment);
  a live peer's kernel answers them whether or not its application is stuck, and a
  window-probing or pinging client never gets probed at all. The kernel then fails the
  socket (``ETIMEDOUT``: ``EPOLLERR``), which the watch sees. The previous settings
  come back when the wait ends. If the broker has unacknowledged output to the dead
  peer (AMQP heartbeats, deliveries), the kernel does not probe but retransmits, and
  gives up after ``net.ipv4.tcp_retries2`` (~15 minutes by default) with the same
  error. (``TCP_USER_TIMEOUT`` would shorten that, but it also aborts a live peer whose
  receive window stayed closed that long, so it is not set.)
* **What a hang-up does.** RabbitMQ treats a client's FIN as the end of the connection
  (a half-close included: a client that shut down its sending side is gone); so do we.
  What the peer sent before its FIN is still unread (besides the one read an MQTT
  protocol object holds: it blocks after receiving). If that is at most
  ``HANGUP_INPUT_MAX`` (one read: what any new connection brings in during an alarm
  with its first burst anyway), the wait ends as if the alarm had cleared for this
  connection alone: the loop reads the rest and the protocol handles it in order, then
  the end of input - exactly what a connection whose peer closed always does (a
  trailing MQTT DISCONNECT or AMQP connection.close is honoured, so a will goes out
  only per the normal rules; the replies still reach a half-closed client). If more is
  buffered it is discarded unprocessed - none of it was acknowledged, so no
  acknowledged data is lost, and a client cannot get its whole receive buffer taken in
  during an alarm by hanging up - and the connection ends as lost, like a reset:
  ``trio.BrokenResourceError``, which the loop hands to ``connection_lost``. A socket
  error (reset, keep-alive timeout) ends it the same way.

TLS: ``trio.SSLStream`` wraps a ``SocketStream``; the watch uses that socket (the FIN is
the kernel's, under the TLS records; the unread count is of encrypted bytes). A stream
without any socket (an in-memory stream in tests) only awaits the alarm.

One ``BlockedWatch`` per server (built with the resource alarms, ``oxiedge.app``) holds
the keep-alive setting and the counters (``oxiedge status``, section ``alarms``); each
transport is given it (``net.loop.Transport``).
"""

from __future__ import annotations

import array
import fcntl
import os
import select
import socket
import termios
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import trio
from trio.lowlevel import wait_readable

from oxiedge.net.hot import RECV_SIZE
from oxiedge.net.sockets import transport_socket

#: Unread input a hung-up blocked peer may leave for the protocol to handle (one read);
#: more is discarded unprocessed and the connection ends as lost.
HANGUP_INPUT_MAX = RECV_SIZE
#: Seconds between two looks at the socket where there is no epoll (or no descriptor).
HANGUP_POLL_INTERVAL = 1.0
#: TCP keep-alive while blocked: (first probe after idle s, interval s, probes);
#: ``--blocked-keepalive`` / ``OXIEDGE_BLOCKED_KEEPALIVE`` sets a server's (``BlockedWatch``).
BLOCKED_KEEPALIVE = (60, 20, 3)


_EPOLL_HANGUP = (getattr(select, "EPOLLRDHUP", 0) | getattr(select, "EPOLLHUP", 0)
                 | getattr(select, "EPOLLERR", 0))
_POLL_HANGUP = getattr(select, "POLLRDHUP", 0) | select.POLLHUP | select.POLLERR
_ERROR = getattr(select, "EPOLLERR", select.POLLERR)  # (the same bit on Linux)


class BlockedWatch:
    """Blocked connections' watch for their peer (see the module docstring): one per
    server, given to every transport. ``wait_unblocked`` awaits the alarms' end;
    ``keepalive`` is ``--blocked-keepalive`` (first probe after idle s, interval s, probes)."""

    def __init__(self, wait_unblocked: Callable[[], Awaitable[None]],
                 keepalive: tuple[int, int, int] = BLOCKED_KEEPALIVE) -> None:
        self.wait_unblocked = wait_unblocked
        #: (level, option, value) set on a blocked socket
        self.keepalive_options = _keepalive_options(keepalive)
        self.counters = {
            "blocked_hangups": 0,  # blocked connections whose peer hung up or vanished
            "blocked_hangups_discarded": 0,  # ... of which the unread input was discarded
            "blocked_discarded_bytes": 0,  # that input, in bytes
            "blocked_connections": 0,  # a gauge: connections waiting for an alarm now
        }

    def status(self) -> dict[str, int]:
        """The counters (``oxiedge status`` shows them with the alarms')."""
        return dict(self.counters)

    async def wait(self, stream: trio.abc.Stream) -> bool:
        """Await the alarms' end while watching the peer (see the module docstring).

        Returns False when the alarm cleared, True when the peer hung up leaving at most
        ``HANGUP_INPUT_MAX`` bytes unread (the caller reads them as if unblocked, and waits
        for no alarm again); raises ``trio.BrokenResourceError`` when the peer is gone and
        the connection must end as lost."""
        counters = self.counters
        counters["blocked_connections"] += 1
        try:
            return await self._wait(stream)
        finally:
            counters["blocked_connections"] -= 1

    async def _wait(self, stream: trio.abc.Stream) -> bool:
        sock = transport_socket(stream)
        if sock is None:
            await self.wait_unblocked()
            return False
        fd = sock.fileno()
        seen = 0  # the hang-up events, once the watch saw them
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                nonlocal seen
                try:
                    seen = await _wait_hangup(fd)
                except OSError:
                    return  # (cannot watch: only the alarm ends the wait, as before)
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            with _keepalive(sock, self.keepalive_options):
                await self.wait_unblocked()
            nursery.cancel_scope.cancel()
        if not seen:
            return False
        counters = self.counters
        counters["blocked_hangups"] += 1
        if seen & _ERROR:
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            raise trio.BrokenResourceError(
                "peer gone while blocked by a resource alarm: "
                + (os.strerror(err) if err else "hang-up"))
        unread = _unread(fd)
        if unread <= HANGUP_INPUT_MAX:
            return True
        counters["blocked_hangups_discarded"] += 1
        counters["blocked_discarded_bytes"] += unread
        raise trio.BrokenResourceError(
            f"peer closed while blocked by a resource alarm; its {unread} unread bytes "
            "were discarded")


async def _wait_hangup(fd: int) -> int:
    """Return the hang-up events once the socket shows one (its input stays unread)."""
    try:
        ep = select.epoll()
    except (AttributeError, OSError):  # (no epoll here, or no descriptor left: EMFILE)
        return await _poll_hangup(fd)
    with ep:
        try:
            ep.register(fd, _EPOLL_HANGUP)
        except OSError:
            return await _poll_hangup(fd)
        while True:
            await wait_readable(ep.fileno())
            events = ep.poll(0)
            if events:  # (none: a spurious wake-up)
                return int(events[0][1])


async def _poll_hangup(fd: int) -> int:
    poller = select.poll()
    poller.register(fd, _POLL_HANGUP)
    while True:
        events = poller.poll(0)
        if events:
            flags = int(events[0][1])
            return _ERROR if flags & (select.POLLERR | select.POLLNVAL) else flags
        await trio.sleep(HANGUP_POLL_INTERVAL)


def _unread(fd: int) -> int:
    """Bytes waiting unread in the socket's receive queue."""
    buf = array.array("i", [0])
    try:
        fcntl.ioctl(fd, termios.FIONREAD, buf)
    except OSError:
        return 0
    return buf[0]


def _keepalive_options(setting: tuple[int, int, int]) -> list[tuple[int, int, int]]:
    idle, interval, count = setting
    wanted = [("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", interval), ("TCP_KEEPCNT", count)]
    options = [(socket.IPPROTO_TCP, getattr(socket, name), value)
               for name, value in wanted if hasattr(socket, name)]
    # Enabled last (after its timings), so disabled first when restored.
    options.append((socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1))
    return options


@contextmanager
def _keepalive(sock: Any, options: list[tuple[int, int, int]]) -> Iterator[None]:
    """TCP keep-alive probes on ``sock`` for the block; the previous settings after."""
    saved: list[tuple[int, int, int]] = []
    try:
        for level, option, value in options:
            saved.append((level, option, sock.getsockopt(level, option)))
            sock.setsockopt(level, option, value)
    except OSError:
        pass  # (not TCP, e.g. a Unix socket: no probes)
    try:
        yield
    finally:
        for level, option, old in reversed(saved):
            try:
                sock.setsockopt(level, option, old)
            except OSError:
                pass  # (the socket broke meanwhile: it is closing anyway)

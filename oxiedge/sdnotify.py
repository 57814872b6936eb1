"""A tiny, dependency-free client for systemd's service notification protocol.

Theory of operation
-------------------
A unit with ``Type=notify`` passes the path of a datagram socket in ``NOTIFY_SOCKET``.
The service tells the manager about its state by sending newline-separated
``KEY=VALUE`` assignments in one ``AF_UNIX``/``SOCK_DGRAM`` datagram (sd_notify(3)):

- ``READY=1`` once start-up is complete: for oxiedge that is after recovery and after
  every listener is bound, i.e. right after the ``oxiedge ready`` log line. Until then
  ``systemctl start`` blocks and units ordered after oxiedge wait.
- ``WATCHDOG=1`` keep-alive pings when the unit has ``WatchdogSec=``. The manager passes
  the interval in ``WATCHDOG_USEC`` (and the pid that must ping in ``WATCHDOG_PID``);
  sd_watchdog_enabled(3) recommends pinging every half of that interval. The watchdog is
  armed only once start-up completed, so a long recovery does not trip it (the start
  timeout, ``TimeoutStartSec=``, covers that phase).
- ``STOPPING=1`` when a clean shutdown begins, ``STATUS=...`` free text that
  ``systemctl status`` shows.

A path starting with ``@`` names a socket in the Linux abstract namespace: the ``@`` is
replaced by a NUL byte. When ``NOTIFY_SOCKET`` is unset (running from a shell, in tests)
every call is a no-op that returns ``False``. Send errors are swallowed and reported as
``False`` too: a broker must never die because its supervisor went away.

Usage from a trio program::

    sdnotify.ready()                      # after "oxiedge ready"
    nursery.start_soon(sdnotify.watchdog_loop)   # no-op when no watchdog is configured
    ...
    sdnotify.stopping()                   # on SIGTERM, before closing listeners
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

__all__ = [
    "notify",
    "ready",
    "status",
    "stopping",
    "watchdog",
    "watchdog_interval",
    "watchdog_loop",
]


def _socket_address() -> str | bytes | None:
    """Return the address of the manager's notification socket, or None if not supervised."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return None
    if path.startswith("@"):
        # Abstract namespace: the kernel wants a leading NUL instead of "@".
        return b"\0" + path[1:].encode()
    if path.startswith("/"):
        return path
    # Other schemes (e.g. "vsock:" in newer systemd) are not used on a device: ignore.
    return None


def notify(*assignments: str) -> bool:
    """Send ``KEY=VALUE`` assignments to the service manager in one datagram.

    Returns True when the datagram was sent, False when not supervised or on any error.
    """
    address = _socket_address()
    if address is None or not assignments:
        return False
    message = "\n".join(assignments).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(message, address)
    except OSError:
        return False
    return True


def ready(status_text: str | None = None) -> bool:
    """Report that start-up finished (recovery done, listeners bound)."""
    if status_text is None:
        return notify("READY=1")
    return notify("READY=1", _status_line(status_text))


def stopping() -> bool:
    """Report that a clean shutdown has begun."""
    return notify("STOPPING=1")


def watchdog() -> bool:
    """Send one watchdog keep-alive ping."""
    return notify("WATCHDOG=1")


def status(text: str) -> bool:
    """Set the one-line status that ``systemctl status oxiedge`` shows."""
    return notify(_status_line(text))


def _status_line(text: str) -> str:
    # The protocol is line based: a newline would start a new (bogus) assignment.
    return "STATUS=" + " ".join(text.splitlines())


def watchdog_interval() -> float | None:
    """Return the watchdog timeout in seconds, or None when no watchdog applies to us.

    Mirrors sd_watchdog_enabled(3): ``WATCHDOG_USEC`` must be a positive integer, and
    ``WATCHDOG_PID``, when set, must be this process's pid (a child process inherits the
    variables but is not the one the manager watches). Ping every half of this value.
    """
    raw_usec = os.environ.get("WATCHDOG_USEC")
    if not raw_usec:
        return None
    try:
        usec = int(raw_usec)
    except ValueError:
        return None
    if usec <= 0:
        return None
    raw_pid = os.environ.get("WATCHDOG_PID")
    if raw_pid:
        try:
            pid = int(raw_pid)
        except ValueError:
            return None
        if pid != os.getpid():
            return None
    return usec / 1_000_000


async def watchdog_loop(healthy: Callable[[float], bool] | None = None) -> None:
    """Ping the watchdog every half interval, forever; return at once when there is none.

    Run it as a task in the server's nursery. The ping proves the event loop still runs
    tasks, which is the liveness that matters for a trio server. ``healthy(interval)`` is
    asked before each ping: while it says False no ping is sent, so the manager kills and
    restarts a server that is alive but can no longer write (a failed or hung WAL sync).
    """
    interval = watchdog_interval()
    if interval is None or _socket_address() is None:
        return
    import trio  # imported lazily so the module stays importable without trio

    while True:
        if healthy is None or healthy(interval):
            watchdog()
        await trio.sleep(interval / 2)

"""What a sans-IO protocol object asks its transport loop to do (no trio in here).

The loop (``oxiedge.net.loop``) feeds a protocol object bytes and then calls
``next_action()`` until it gets ``NEED_DATA`` or a ``Close``; each action names one
thing only the loop can do (await the commit, run the login check in a thread, let
other tasks run, wait for an alarm to clear). The protocol never awaits, never sleeps
and never touches a socket, so it is tested as ``(state, bytes in) -> bytes out``.

Actions are singletons or frozen, slotted dataclasses (compared with ``is`` / ``type``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: Everything received so far is handled. The loop sends ``data_to_send()`` (one write,
#: from the reading task when the writer is idle), then reads more, until ``deadline``.
NEED_DATA = _Marker("NEED_DATA")
#: Send ``data_to_send()`` now, before what the next action produces (order matters:
#: e.g. a burst's PUBREC goes before the held QoS 2 deliveries it releases).
SEND = _Marker("SEND")
#: Await ``store.commit()`` (everything staged becomes durable), then call
#: ``commit_done(None)``, or ``commit_done(exc)`` if it failed, or ``commit_cancelled()``
#: if the task was cancelled meanwhile (the exception then propagates).
COMMIT = _Marker("COMMIT")
#: Staged work nobody waits for (a subscriber's ack deleting its record): ``store.kick()``.
KICK = _Marker("KICK")
#: A long burst: let other tasks run (``trio.sleep(0)``), then ask again.
CHECKPOINT = _Marker("CHECKPOINT")
#: A resource alarm holds publishers: await it clearing, then call ``unblocked()``. The
#: loop watches the unread socket meanwhile (``net.blocked``): if the peer hangs up it
#: calls ``unblocked()`` early and its last input follows, then ``b""`` (too much of it:
#: ``connection_lost`` instead); once it hung up, no alarm holds the connection again.
BLOCKED = _Marker("BLOCKED")

Action = object  # one of the markers above, ``Authenticate`` or ``Close``


@dataclass(frozen=True, slots=True)
class Authenticate:
    """Check these credentials off the event loop (``oxiedge.login``), then call
    ``authenticated(ok)``."""

    username: str | None
    password: bytes | None


@dataclass(frozen=True, slots=True)
class Close:
    """End the connection: the loop stops reading, flushes what is already written
    (bounded in time) and closes the stream. ``reason`` is for the log."""

    reason: str


class StreamProtocol(Protocol):
    """A protocol object as the transport loop drives it (see the package docstring)."""

    #: When the next read must have arrived, in the loop's clock (``math.inf``: never).
    deadline: float

    def receive_data(self, data: bytes | bytearray) -> None:
        """Bytes from the peer; ``b""`` means the peer closed its side."""

    def next_action(self) -> object:
        """The next thing to do (one of the actions of this module)."""

    def data_to_send(self) -> bytes:
        """Replies that may go now (taken: a second call returns ``b""``)."""

    def commit_done(self, error: Exception | None) -> None:
        """The commit asked for by ``COMMIT`` returned (``error``: it failed)."""

    def commit_cancelled(self) -> None:
        """The task was cancelled while awaiting the commit (the loop re-raises)."""

    def authenticated(self, ok: bool) -> None:
        """The answer to ``Authenticate``."""

    def unblocked(self) -> None:
        """The alarm that ``BLOCKED`` waited for has cleared, or the peer hung up meanwhile
        (the end of input follows its last bytes). No deadline applies while blocked:
        the peer's keep-alive traffic waits unread, so a protocol suspends its own."""

    def timed_out(self) -> None:
        """Nothing arrived before ``deadline``."""

    def connection_lost(self, reason: str) -> None:
        """The stream broke (reset, write failed): the peer is gone."""

    def on_sent(self) -> bool:
        """The writer sent buffered bytes (room again): True to kick the committer."""

    def connection_closed(self) -> bool:
        """Last call, the stream is closing: True to kick the committer."""


def run_until_await(proto: StreamProtocol, send_now: Callable[[bytes], None],
                    kick: Callable[[], None]) -> object:
    """Do the protocol's actions that need no await - ``SEND`` (through ``send_now``) and
    ``KICK`` - and return the first one that does, or ``NEED_DATA``. The one place both
    the reader task (``Transport._perform``) and the hot loop (``serve_inline``) run them."""
    next_action = proto.next_action
    while True:
        action = next_action()
        if action is SEND:
            data = proto.data_to_send()
            if data:
                send_now(data)
        elif action is KICK:
            kick()
        else:
            return action

"""MQTT 5 wills that wait: the Will Delay Interval (3.1.3.2.2), sans-IO.

A will with a delay is not published when its connection ends abnormally but at the
earlier of the delay and the end of its session (MQTT-3.1.3-9); a new connection to the
session before then cancels it (``cancel``, from CONNECT). ``DelayedWills`` keeps them per
client id on the broker's monotonic clock; ``MqttService``'s expiry task calls ``due``
every second and commits what the wills staged. Delayed wills live in memory only: one
pending at a shutdown or crash is not published (the spec lets a server end the session
and its will together; a restarted broker has no connection to say it ended abnormally).
"""

from __future__ import annotations

from collections.abc import Callable

#: Publishes one will; True if it staged durable work (the caller commits).
Publish = Callable[[], bool]


class DelayedWills:
    """Wills waiting for their delay, by client id."""

    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: dict[str, tuple[float, Publish]] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def delay(self, client_id: str, at: float, publish: Publish) -> None:
        """Publish the will of ``client_id`` at ``at`` unless ``cancel`` comes first."""
        self._waiting[client_id] = (at, publish)

    def cancel(self, client_id: str) -> bool:
        """A new connection to the session: its will is not sent (MQTT-3.1.3-9)."""
        return self._waiting.pop(client_id, None) is not None

    def due(self, now: float) -> bool:
        """Publish every will whose time has come; True if any staged durable work."""
        staged = False
        for cid in [cid for cid, (at, _p) in self._waiting.items() if at <= now]:
            _at, publish = self._waiting.pop(cid)
            staged |= publish()
        return staged

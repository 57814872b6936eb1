"""``$SYS/broker/...``: the broker's state as MQTT topics, with Mosquitto's names.

Theory of operation
-------------------
Every ``--sys-interval`` seconds (default 10; 0: none) :class:`SysTree` reads counters that
are kept up to date elsewhere - the broker's ``Stats`` (``mqtt/bounds.py``), the sizes of its
session table, subscription trie and retained store (each a stored count), and the bytes of
every MQTT connection's reads and sends (``net.output.Traffic``, one per service) - and
publishes the values that changed since the last round. Nothing is scanned to make a value
except ``messages/stored`` and ``store/messages/*``: the queued messages are summed over the
sessions (their queues keep their own counts; the sum is bounded by ``--mqtt-max-sessions``,
the same sum ``oxiedge status`` makes).

Each value is published as Mosquitto does it: **retained, QoS 0, never persisted**. It is
kept in the retained store in memory only (``RetainedStore.keep_unstored``: no record, so a
restart starts the tree afresh and nothing of it reaches the disk), delivered at once to the
connected sessions whose subscriptions match (QoS 0: an offline session gets nothing queued),
and replayed to a later subscriber like any retained message. The MQTT rules apply unchanged:
``#`` and ``+`` at the first level do not match ``$SYS`` (MQTT-4.7.2-1), so only a filter
beginning with ``$SYS`` sees it, and each delivery passes the subscriber's read rules
(docs/permissions.md) as a routed one does. Clients may not publish to ``$SYS``
(``topics.sys_topic``: the handlers acknowledge and drop it, as a denied publish).

Load averages (``load/.../1min``, ``5min``, ``15min``) are Mosquitto's: exponentially decayed
moving averages of the per-minute rate, updated every round -
``avg = avg * e^(-dt/T) + rate * (1 - e^(-dt/T))`` with ``T`` = 60, 300 or 900 s.

``messages/received`` and ``messages/sent`` count PUBLISH packets (oxiedge does not count
packets of other types; Mosquitto counts every packet), the same as ``publish/messages/*``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Protocol

import trio

from oxiedge.mqtt.broker import Broker
from oxiedge.mqtt.message import Message

PREFIX = "$SYS/broker/"
#: Mosquitto's load-average windows: topic suffix and time constant in seconds.
WINDOWS = (("1min", 60.0), ("5min", 300.0), ("15min", 900.0))


class ByteCounts(Protocol):
    """What the tree reads of the MQTT connections' bytes (``net.output.Traffic``)."""

    received: int
    sent: int


class LoadAverage:
    """The 1, 5 and 15 minute moving averages of one counter's per-minute rate."""

    __slots__ = ("averages", "last")

    def __init__(self, start: int) -> None:
        self.last = start
        self.averages = [0.0, 0.0, 0.0]

    def update(self, value: int, dt: float) -> None:
        rate = max(0, value - self.last) * 60.0 / dt  # per minute over this round
        self.last = value
        for i, (_name, period) in enumerate(WINDOWS):
            decay = math.exp(-dt / period)
            self.averages[i] = self.averages[i] * decay + rate * (1.0 - decay)


class SysTree:
    """The ``$SYS/broker`` values of one broker, and their publication."""

    def __init__(self, broker: Broker, traffic: ByteCounts, *, version: str, interval: int,
                 uptime: Callable[[], float], clock: Callable[[], float] = time.monotonic
                 ) -> None:  # fmt: skip
        self.broker = broker
        self.traffic = traffic
        self.version = version
        self.interval = interval
        self.uptime = uptime  # seconds since the server started
        self.clock = clock  # for the load averages' time steps
        self.maximum = 0  # most clients connected at once, as seen by the rounds
        self.published = 0  # values published so far
        self.rounds = 0
        self._last: dict[str, bytes] = {}
        self._loads: dict[str, LoadAverage] = {}
        self._last_time: float | None = None

    # ------------------------------------------------------------ the values
    def _counters(self) -> dict[str, int]:
        """The cumulative counters the load averages follow."""
        st, traffic = self.broker.stats, self.traffic
        return {
            "messages/received": st.messages_in, "messages/sent": st.messages_out,
            "publish/received": st.messages_in, "publish/sent": st.messages_out,
            "publish/dropped": self._dropped(), "bytes/received": traffic.received,
            "bytes/sent": traffic.sent, "connections": st.connections_total,
        }

    def _dropped(self) -> int:
        st = self.broker.stats
        return st.dropped + st.dropped_qos0 + st.dropped_too_large + st.expired

    def values(self, now: float) -> dict[str, str]:
        """Every topic (under ``$SYS/broker/``) with its value now."""
        broker = self.broker
        st, traffic = broker.stats, self.traffic
        sessions = broker.sessions
        connected = st.connections
        self.maximum = max(self.maximum, connected)
        queued = queued_bytes = 0
        for s in sessions.values():  # (the one sum: see the module docstring)
            queued += len(s.queue)
            queued_bytes += s.queue_bytes
        stored = len(broker.retained) + queued
        out = {
            "version": f"oxiedge version {self.version}",
            "uptime": f"{int(self.uptime())} seconds",
            "clients/connected": str(connected),
            "clients/disconnected": str(max(0, len(sessions) - connected)),
            "clients/total": str(len(sessions)),
            "clients/maximum": str(self.maximum),
            "clients/expired": str(st.sessions_expired),
            "messages/received": str(st.messages_in),
            "messages/sent": str(st.messages_out),
            "messages/stored": str(stored),
            "publish/messages/received": str(st.messages_in),
            "publish/messages/sent": str(st.messages_out),
            "publish/messages/dropped": str(self._dropped()),
            "bytes/received": str(traffic.received),
            "bytes/sent": str(traffic.sent),
            "subscriptions/count": str(len(broker.subscriptions)),
            "retained messages/count": str(len(broker.retained)),
            "store/messages/count": str(stored),
            "store/messages/bytes": str(broker.retained_bytes + queued_bytes),
        }
        dt = 0.0 if self._last_time is None else now - self._last_time
        self._last_time = now
        for name, value in self._counters().items():
            load = self._loads.get(name)
            if load is None:
                load = self._loads[name] = LoadAverage(value)
            elif dt > 0:
                load.update(value, dt)
            for (window, _period), avg in zip(WINDOWS, load.averages, strict=True):
                out[f"load/{name}/{window}"] = f"{avg:.2f}"
        return out

    def changed(self, now: float) -> list[tuple[str, bytes]]:
        """The ``(topic, payload)`` pairs whose value changed since the last round."""
        out: list[tuple[str, bytes]] = []
        last = self._last
        for name, value in self.values(now).items():
            payload = value.encode()
            if last.get(name) != payload:
                last[name] = payload
                out.append((PREFIX + name, payload))
        return out

    # ------------------------------------------------------------ publication
    def publish(self, topic: str, payload: bytes) -> None:
        """Retain ``payload`` on ``topic`` in memory and deliver it at QoS 0 to the connected
        sessions whose subscriptions match and whose read rules allow it."""
        broker = self.broker
        msg = Message(topic, payload)
        broker.retained.keep_unstored(msg)
        best: dict[object, int] = {}
        acl = broker.acl_active
        for s, _granted in broker.subscriptions.match(topic):
            if s in best:
                continue  # MQTT-3.3.5-1: one copy per client
            best[s] = 0
            if s.conn is None or (acl and s.acl is not None and not s.acl.may_read(topic)):
                continue
            s.deliver(msg, 0, False)
        self.published += 1

    def round(self) -> int:
        """One round: publish what changed; returns how many values."""
        self.rounds += 1
        changed = self.changed(self.clock())
        for topic, payload in changed:
            self.publish(topic, payload)
        return len(changed)

    async def run(self) -> None:
        """A round at once (so ``$SYS/broker/version`` and the rest are retained from the
        start), then one every ``interval`` seconds, until cancelled."""
        while True:
            self.round()
            await trio.sleep(self.interval)

    def status(self) -> dict[str, int]:
        return {"sys_interval": self.interval, "sys_rounds": self.rounds,
                "sys_published": self.published}

"""MQTT 5 wills that wait: the Will Delay Interval (3.1.3.2.2), sans-IO, kept on disk.

A will with a delay is not published when its connection ends abnormally but at the
earlier of the delay and the end of its session (MQTT-3.1.3-9); a new connection to the
session before then cancels it (``cancel``, from CONNECT). ``DelayedWills`` keeps them per
client id with their deadline on the wall clock; ``MqttService``'s expiry task calls
``due`` every second and commits what the wills staged.

Each waiting will is also a ``w`` record (``persist.CF``, key ``w`` + client id), staged
when it starts waiting and deleted when it is sent or cancelled, in the same rounds as
what they cause (the will's copies; the CONNECT that resumed the session). So a will whose
time came while the broker was down is sent after the restart (``load`` reads the records
back at recovery, the next ``due`` sends what is late), and one whose session was resumed
before the crash is not. The deadline is absolute (wall-clock milliseconds), like an MQTT 5
session's own (``e`` record): the delay runs while the broker is down.

Record value: deadline (Q, wall-clock ms), flags (B: QoS bits 0-1, RETAIN bit 2), topic
length (H), topic, the will's properties without the Will Delay Interval as a PUBLISH
property block (their length first), payload.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Protocol

from oxiedge.mqtt.bodies import ProtocolError
from oxiedge.mqtt.packets import PacketType
from oxiedge.mqtt.packets5 import Will5
from oxiedge.mqtt.persist import CF, check_topic
from oxiedge.mqtt.properties import decode_properties, encode_properties

WILL = b"w"
_HEAD = struct.Struct(">QBH")
_RETAIN = 4

#: Publishes one will at wall-clock time ``now``; True if it staged durable work.
Route = Callable[[Will5, float], bool]


class WillStore(Protocol):
    """The part of ``oxiedge.store.Store`` the delayed wills use."""

    def stage_put(self, cf: str, key: bytes, value: bytes) -> None: ...
    def stage_delete_key(self, cf: str, key: bytes) -> None: ...
    def iter_raw(self, cf: str, prefix: bytes = b"", start: bytes | None = None
                 ) -> Iterator[tuple[bytes, bytes]]: ...  # fmt: skip
    def quarantine(self, cf: str, key: bytes, value: bytes | None, reason: str) -> bool: ...


def will_key(client_id: str) -> bytes:
    return WILL + client_id.encode("utf-8")


def encode_will(at: float, will: Will5) -> bytes:
    """A ``w`` record's value (module docstring)."""
    topic = will.topic.encode("utf-8")
    props = will.properties._replace(will_delay_interval=None)
    return (_HEAD.pack(max(1, round(at * 1000)), will.qos | (_RETAIN if will.retain else 0),
                       len(topic))
            + topic + encode_properties(props, PacketType.PUBLISH) + will.payload)


def decode_will(value: bytes) -> tuple[float, Will5]:
    """``(deadline, will)`` of a ``w`` record; ValueError if it does not decode."""
    try:
        deadline, flags, n = _HEAD.unpack_from(value)
        start = _HEAD.size
        topic = check_topic(bytes(value[start:start + n]).decode("utf-8"))
        if flags & ~(_RETAIN | 3) or flags & 3 == 3 or start + n > len(value):
            raise ValueError(f"bad will flags {flags:#x} or length")
        props, end = decode_properties(bytes(value), start + n, PacketType.PUBLISH)
    except (struct.error, UnicodeDecodeError, ProtocolError, IndexError) as exc:
        raise ValueError(f"will record: {exc}") from None
    will = Will5(topic, bytes(value[end:]), flags & 3, bool(flags & _RETAIN), props)
    return deadline / 1000, will


class DelayedWills:
    """Wills waiting for their delay, by client id (see the module docstring). ``store``:
    None without persistence (they then live in memory only); ``route`` publishes one."""

    __slots__ = ("_waiting", "route", "store")

    def __init__(self, store: WillStore | None, route: Route) -> None:
        self._waiting: dict[str, tuple[float, Will5]] = {}
        self.store = store
        self.route = route

    def __len__(self) -> int:
        return len(self._waiting)

    def delay(self, client_id: str, at: float, will: Will5) -> bool:
        """Publish the will of ``client_id`` at ``at`` (wall clock) unless ``cancel`` comes
        first; True if its record was staged (commit)."""
        self._waiting[client_id] = (at, will)
        if self.store is None:
            return False
        self.store.stage_put(CF, will_key(client_id), encode_will(at, will))
        return True

    def cancel(self, client_id: str) -> bool:
        """A new connection to the session: its will is not sent (MQTT-3.1.3-9); True if
        one was waiting (its record's deletion is staged)."""
        if self._waiting.pop(client_id, None) is None:
            return False
        if self.store is not None:
            self.store.stage_delete_key(CF, will_key(client_id))
        return True

    def due(self, now: float) -> bool:
        """Publish every will whose time has come by ``now`` (wall clock); True if any
        staged durable work."""
        staged = False
        for cid in [cid for cid, (at, _w) in self._waiting.items() if at <= now]:
            _at, will = self._waiting.pop(cid)
            if self.store is not None:
                self.store.stage_delete_key(CF, will_key(cid))
                staged = True
            staged |= self.route(will, now)
        return staged

    def load(self) -> int:
        """Recovery: the wills that were waiting when the broker stopped (a record that
        does not decode is quarantined); how many."""
        store = self.store
        if store is None:
            return 0
        for key, value in store.iter_raw(CF, WILL):
            try:
                client_id = bytes(key[1:]).decode("utf-8")
                self._waiting[client_id] = decode_will(value)
            except ValueError as exc:  # (UnicodeDecodeError is one)
                store.quarantine(CF, bytes(key), bytes(value), f"delayed will: {exc}")
        return len(self._waiting)

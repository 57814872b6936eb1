"""Inbound QoS 2 packet ids awaiting PUBREL: one session's part of "method B" (4.3.3).

A QoS 2 PUBLISH is routed once, when it arrives; its packet id is kept here until the
client's PUBREL, so a re-send of that PUBLISH (DUP, also after a crash) is answered and
not routed again (MQTT-4.3.3-2). A durable session keeps each id as an ``x`` record with
its arrival number (``persist.rx2_value``), staged in the round that carries the
message's copies, so the oldest one is known after a restart too.

Bounded: at most ``Limits.max_qos2_pending`` ids per session; beyond that the oldest is
forgotten (counted in ``Stats.qos2_ids_forgotten``, its record deleted). A client that
never sends PUBREL cannot make the broker hold 65,535 ids per session; only a re-send of
that very PUBLISH after that many newer ones would be routed a second time.

Nothing here awaits; the session's owner commits what is staged.
"""

from __future__ import annotations

from collections.abc import Iterator

from oxiedge.mqtt import persist
from oxiedge.mqtt.bounds import Limits, Stats
from oxiedge.mqtt.persist import CF


class InboundQos2:
    """The held inbound ids of one session, oldest first (``Session.rx2``)."""

    __slots__ = ("_ids", "_limits", "_next", "_owner_b", "_stats", "_store")

    def __init__(self, store: persist.RawStore | None, owner_b: bytes, limits: Limits,
                 stats: Stats) -> None:  # fmt: skip
        self._store = store  # None: nothing goes to disk
        self._owner_b = owner_b
        self._limits = limits
        self._stats = stats
        self._ids: dict[int, None] = {}  # (insertion order: arrival order)
        self._next = 1  # the arrival number of the next one (``persist.rx2_value``)

    def __contains__(self, pid: object) -> bool:
        return pid in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids)

    def received(self, pid: int) -> bool:
        """Record an inbound QoS 2 packet id (until PUBREL). False if it was already
        recorded: a duplicate that must not be routed again (MQTT-4.3.3-2)."""
        ids = self._ids
        if pid in ids:
            return False
        if len(ids) >= self._limits.max_qos2_pending:
            self._forget_oldest()
        ids[pid] = None
        store = self._store
        if store is not None:
            arrival = self._next
            self._next = arrival + 1
            store.stage_put(CF, persist.rx2_key(self._owner_b, pid), persist.rx2_value(arrival))
        return True

    def released(self, pid: int) -> bool:
        """PUBREL: forget the packet id; True if a deletion was staged. PUBCOMP must wait
        for its commit, or a crash could leave a stale id that swallows a new message."""
        if pid not in self._ids:
            return False
        del self._ids[pid]
        if self._store is not None:
            self._store.stage_delete_key(CF, persist.rx2_key(self._owner_b, pid))
            return True
        return False

    def recover(self, held: dict[int, int]) -> None:
        """The held ids found on disk (id -> arrival number), oldest first; a set over the
        bound (written by an older oxiedge) is cut to it at once."""
        for pid, _arrival in sorted(held.items(), key=lambda item: (item[1], item[0])):
            self._ids[pid] = None
        self._next = max(held.values(), default=0) + 1
        while len(self._ids) > self._limits.max_qos2_pending:
            self._forget_oldest()

    def _forget_oldest(self) -> None:
        """The bound (module docstring): the oldest id goes, with its record."""
        old = next(iter(self._ids))
        del self._ids[old]
        self._stats.qos2_ids_forgotten += 1
        if self._store is not None:
            self._store.stage_delete_key(CF, persist.rx2_key(self._owner_b, old))

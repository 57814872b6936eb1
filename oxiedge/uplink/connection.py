"""The ``LinkIO`` of one connection attempt of one uplink: its in-flight window over the
outbox (``uplink.py`` explains the whole).

``take`` hands out committed outbox records in seq order (first held ones to send again,
then the returned ones of a due retry round) while fewer than the window are unconfirmed,
committing the outbox first when the records to send were only staged: only what is on disk
here goes upstream. ``confirmed`` / ``returned`` / ``park`` settle one in-flight record and
wake a waiting ``take`` once the window has room for a batch; ``deliver`` hands an inbound
command to the manager; ``up`` records the connection. ``close`` gives what was still in
flight back to the outbox, so the next attempt sends it again, in order.

The connection sees its uplink only as a ``ConnectionHost``: the outbox and the uplink's
send position, counters, retry rounds and refusals that outlive one attempt. ``uplink.py``
builds connections and ``Uplink`` is the host; this module does not import it back.
"""

from __future__ import annotations

import math
import time
from typing import Protocol

import trio

from ..staged import MessageProps
from .definitions import UplinkDef
from .held import WAITING
from .link import Endpoint, OutMessage
from .outbox import Outbox
from .ports import AppView


class ConnectionHost(Protocol):
    """What one connection attempt needs of its uplink (``uplink.Uplink`` is the one): the
    state that outlives the attempt, which the connection reads and advances."""

    app: AppView
    definition: UplinkDef
    outbox: Outbox
    #: Woken when there is something to take: new records, a freed window, a return.
    lot: trio.lowlevel.ParkingLot
    #: Seqs below ``durable_end`` are on disk; below ``sent_end`` were sent at least once.
    durable_end: int
    sent_end: int
    #: Hand out at least this many at once while a window is in flight.
    batch_min: int
    #: While set, send one at a time up to this seq (finding a refused publish).
    probe_until: int | None
    refused: dict[str, str]
    retry_at: float | None
    forwarded: int
    resent: int
    retried: int
    confirmed: int

    def retry_due(self) -> bool: ...
    def take_returned(self, room: int) -> list[OutMessage]: ...
    def retry_taken(self) -> None: ...
    def without_refused(self, batch: list[OutMessage]) -> list[OutMessage]: ...
    def deleted(self) -> None: ...
    def after_removal(self) -> None: ...
    def note_returned(self, seq: int, reason: str) -> None: ...
    def note_parked(self, seq: int, reason: str) -> None: ...
    async def deliver(self, topic: str, payload: bytes,
                      props: MessageProps | None = None) -> None: ...
    def connected(self, endpoint: Endpoint, detail: str) -> None: ...


class UplinkConnection:
    """``LinkIO`` for one connection attempt of one uplink."""

    def __init__(self, uplink: ConnectionHost) -> None:
        self.uplink = uplink
        self.inflight: dict[int, OutMessage] = {}
        self.retrying: set[int] = set()  # in flight again after a Basic.Return
        self.up_at: float | None = None

    async def take(self, limit: int) -> list[OutMessage]:
        u = self.uplink
        box = u.outbox
        while True:
            window = 1 if u.probe_until is not None else u.definition.window
            room = min(limit, window - len(self.inflight))
            if room > 0 and box.held.waiting:  # freed by a re-check, or found at start-up
                again = box.take_held(WAITING, 0, room)
                if again:
                    return self._out(again)
            if room > 0 and u.retry_due():
                retry = u.take_returned(room)
                if retry:
                    self.retrying.update(m.seq for m in retry)
                    u.retried += len(retry)
                    return self._out(retry)
            waiting = len(box.log)
            if room > 0 and waiting > 0 and (room >= u.batch_min or waiting <= room
                                             or not self.inflight):
                staged_end = box.next_seq
                if u.durable_end < staged_end:
                    # Only what is on disk here goes upstream.
                    await u.app.store.commit()
                    u.durable_end = max(u.durable_end, staged_end)
                batch = box.take(room, u.durable_end)
                if batch and u.refused:
                    batch = u.without_refused(batch)
                if batch:
                    for m in batch:
                        if m.seq < u.sent_end:
                            u.resent += 1
                    u.sent_end = max(u.sent_end, batch[-1].seq + 1)
                    return self._out(batch)
                continue
            # Wake for new messages, a freed window, or (with room) the next retry round.
            wake = math.inf
            if room > 0 and box.returned and u.retry_at is not None:
                wake = u.retry_at
            with trio.move_on_at(wake):
                await u.lot.park()

    def _out(self, batch: list[OutMessage]) -> list[OutMessage]:
        for m in batch:
            self.inflight[m.seq] = m
        self.uplink.forwarded += len(batch)
        return batch

    def close(self) -> None:
        """The attempt is over: what it had in flight goes back, to be sent again by the
        next one (in order; an upstream duplicate at worst, never a loss)."""
        if self.inflight:
            items, self.inflight = list(self.inflight.values()), {}
            self.retrying.clear()
            self.uplink.outbox.release(items)

    def confirmed(self, seq: int) -> None:
        u = self.uplink
        self.inflight.pop(seq, None)
        if u.outbox.remove(seq):
            u.confirmed += 1
            u.deleted()
        if seq in self.retrying:
            self.retrying.discard(seq)
            u.retry_taken()
        if u.probe_until is not None and seq >= u.probe_until:
            u.probe_until = None  # past every message that was in flight at the refusal
        u.after_removal()
        self._window_freed()

    def returned(self, seq: int, reason: str) -> None:
        self.inflight.pop(seq, None)
        self.retrying.discard(seq)
        self.uplink.note_returned(seq, reason)
        self._window_freed()

    def park(self, seq: int, reason: str) -> None:
        self.inflight.pop(seq, None)
        self.retrying.discard(seq)
        self.uplink.note_parked(seq, reason)
        self._window_freed()

    def _window_freed(self) -> None:
        u = self.uplink
        if len(self.inflight) <= u.definition.window - u.batch_min or not self.inflight:
            u.lot.unpark_all()

    async def deliver(self, topic: str, payload: bytes,
                      props: MessageProps | None = None) -> None:
        await self.uplink.deliver(topic, payload, props)

    def up(self, endpoint: Endpoint, detail: str = "") -> None:
        self.up_at = time.monotonic()
        self.uplink.connected(endpoint, detail)

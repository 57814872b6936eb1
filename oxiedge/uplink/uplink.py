"""One uplink: its outbox, its link task, its in-flight window and counters.

Theory of operation
-------------------
``Uplink.run`` connects to the uplink's nodes in turn (``run_amqp_link`` /
``run_mqtt_link``) and, after a failure, waits with exponential back-off and jitter. An
``UplinkConnection`` (``connection.py``) is the link's ``LinkIO``: ``take`` hands out
committed outbox records in seq order while fewer than ``window`` are unconfirmed;
``confirmed`` stages the record's delete and kicks the committer; ``deliver`` publishes an
inbound command locally through the manager. A new connection starts again from the oldest
record, so what was in flight when a link died is sent again: duplicates upstream, at most
one window (counted in ``resent``), never a loss. Deletes of confirmed records are
committed in groups (half a window, or 50 ms after the first), not one synced round each,
so a crash can add up to half a window of duplicates more.

Nothing leaves the outbox that the upstream did not take:

* a message the upstream returns (AMQP Basic.Return: no queue for its routing key) is
  flagged ``RETURNED`` and handed out again in *retry rounds*: the first 1 s after the
  return, then doubling up to 60 s while messages keep coming back, back to 1 s once a
  retried one is confirmed;
* a message a link cannot express upstream is flagged ``PARKED`` and not sent; after a
  change of protocol, prefix or exchange (or of an uplink with parked messages), and at
  every start, the whole outbox is re-checked, parking what can no longer be sent and
  freeing what now can;
* a publish the upstream refuses by closing the channel (403: the routing key may not be
  written; 406: too large) is found exactly - with several in flight, the next connection
  sends one at a time until past them - and parked: for 403 its whole topic, for others
  only that message.

All of it is counted in ``uplink status`` (``returned`` / ``returned_waiting``, ``retried``,
``parked``) with a ``warning`` line.

Bounds: ``max_messages`` / ``max_bytes`` per outbox. ``drop-oldest`` deletes the oldest
records (counted in ``dropped``); ``block`` raises a resource alarm that stops every
publishing connection from reading until the upstream has drained the outbox below the bound.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

from ..amqp.constants import ACCESS_REFUSED
from ..staged import MessageProps, Origin
from ..store import CommitError
from .connection import UplinkConnection
from .definitions import UplinkDef
from .held import PARKED, RETURNED
from .link import (
    Endpoint,
    LinkError,
    LinkIO,
    LinkOptions,
    OutMessage,
    PublishRefused,
    upstream_name,
)
from .outbox import Outbox
from .ports import AppView

LinkRunner = Callable[[Endpoint, LinkOptions, LinkIO], Awaitable[None]]
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
#: Returned (Basic.Return) messages are retried after this, doubling up to RETRY_MAX while
#: the upstream keeps returning them; back to RETRY_FIRST once it takes one.
RETRY_FIRST = 1.0
RETRY_MAX = 60.0
#: Topics remembered as refused by the upstream (their messages are parked).
REFUSED_TOPICS_MAX = 1024
#: Records re-checked per event-loop turn after the protocol or prefix changed.
RECHECK_CHUNK = 2000


def _runner(protocol: str) -> LinkRunner:
    if protocol == "amqp":
        from .amqp_link import run_amqp_link
        return run_amqp_link
    from .mqtt_link import run_mqtt_link
    return run_mqtt_link


class Host(Protocol):
    """What an uplink needs from its manager (``manager.UplinkManager``), so that this
    module does not import it (no import cycle)."""

    app: AppView
    device_id: str
    flush_soon: trio.Event  # set when confirmed deletes wait for a commit round

    async def deliver(self, uplink: Uplink, topic: str, payload: bytes,
                      props: MessageProps | None = None) -> None:
        """Publish an inbound command locally; returns once it is durable."""
        ...


class Uplink:
    """One configured uplink: its outbox, its link task and its counters."""

    def __init__(self, manager: Host, definition: UplinkDef,
                 previous: Uplink | None = None) -> None:
        self.manager = manager
        self.app = manager.app
        self.definition = definition
        self.name = definition.name
        # Its inbound commands' origin on the bus: never queued back to this uplink.
        self.origin = Origin(f"uplink {self.name}")
        self.endpoints = definition.endpoints
        self.protocol = self.endpoints[0].protocol
        self.prefix = definition.prefix.replace("{device}", manager.device_id)
        self.options = LinkOptions(
            name=self.name, device_id=manager.device_id, prefix=self.prefix,
            exchange=definition.exchange, inbound=definition.inbound, window=definition.window,
            heartbeat=definition.heartbeat, ca_file=definition.ca_file,
            queue_type=definition.queue_type,
            retired=tuple(f.replace("{device}", manager.device_id)
                          for f in definition.retired_in))
        self.lot = trio.lowlevel.ParkingLot()
        self.outbox: Outbox
        self.durable_end: int
        self.sent_end: int
        # What is queued must be re-checked when what it is sent as changed.
        self.recheck_needed = False
        if previous is not None:
            # A changed definition keeps the running outbox: records staged but not yet
            # committed exist only in it, and a fresh scan would reuse their seqs.
            self.outbox = previous.outbox
            self.durable_end = previous.durable_end
            self.sent_end = previous.sent_end
            # (Parked ones too: what the upstream refused may be allowed under new
            # credentials or another node.)
            self.recheck_needed = bool(previous.outbox.parked) or (
                previous.protocol, previous.prefix, previous.definition.exchange) != \
                (self.protocol, self.prefix, definition.exchange)
        else:
            # Recovery parks what the definition of now cannot send (it may have changed
            # while the server was down, or the device id in the prefix did).
            self.outbox = Outbox(self.app.store, self.name, sendable=self.routable)
            self.durable_end = self.outbox.next_seq  # seqs below this are on disk
            self.sent_end = 0  # (what a previous run sent is not counted as resent)
            if self.outbox.parked:
                self._warn_parked(self.outbox.parked, "at start-up")
        self.scope = trio.CancelScope()
        self.state = "connecting"
        self.node: str | None = None
        self.connected_since: float | None = None
        self.last_error = ""
        self.reconnects = 0
        self.enqueued = self.forwarded = self.confirmed = self.resent = 0
        self.dropped = self.received = self.skipped = 0
        self.returned = self.retried = 0  # Basic.Returns; returned messages sent again
        # Returned messages wait for a retry round: due at ``retry_at`` (trio clock), then
        # handed out in seq order from ``retry_cursor``; the delay doubles per round.
        self.retry_at: float | None = None
        self.retry_delay = RETRY_FIRST
        self.retry_cursor = 0
        self.last_return = ""  # why the last one came back (for the status warning)
        self.last_parked = ""
        # Topics whose publish the upstream refused (channel closed: 403 / 406 ...): their
        # messages are parked. Probing: after a refusal with several messages in flight,
        # send one at a time until past them, so the refused one is known exactly.
        self.refused: dict[str, str] = {}
        self.probe_until: int | None = None
        if previous is not None:
            for counter in ("enqueued", "forwarded", "confirmed", "resent", "dropped",
                            "received", "skipped", "returned", "retried", "reconnects",
                            "retry_delay", "last_return", "last_parked"):
                setattr(self, counter, getattr(previous, counter))
        if self.outbox.parked and not self.last_parked:
            self.last_parked = "its topic has no upstream name as the uplink is defined"
        self.rate = 0.0
        self._rate_last = (time.monotonic(), 0)
        self._alarm = False
        self.conn: UplinkConnection | None = None
        # Confirmed deletes are committed in bounded groups, not one synced round each: a
        # crash re-sends at most the unsynced ones (< window / 2) plus one window in flight.
        self.deleted_unsynced = 0
        self.flush_every = max(1, definition.window // 2)
        # Hand out batches, not a message per freed slot: each take is one outbox iterator
        # and (for the link) one socket write.
        self.batch_min = max(1, min(64, definition.window // 4))

    # --------------------------------------------------------------- outbound
    def routable(self, topic: str) -> bool:
        """Whether ``topic`` has an upstream name (a topic with '.' has no AMQP routing key)."""
        return upstream_name(self.protocol, self.prefix, topic) is not None

    def enqueue(self, topic: str, payload: bytes, retain: bool = False,
                props: MessageProps | None = None) -> None:
        """Stage one local message with an upstream name (the caller commits). While a link
        is up it stays in memory too, to be sent without a read-back; a message of a topic
        the upstream refuses is parked when it is taken (``without_refused``)."""
        conn = self.conn
        self.outbox.stage(topic, payload, retain, props,
                          keep=conn is not None and conn.up_at is not None)
        self.enqueued += 1
        self.enforce_bounds()
        self.lot.unpark_all()

    def enforce_bounds(self) -> None:
        """Apply the outbox policy when a bound is exceeded."""
        d = self.definition
        box = self.outbox
        if box.messages > d.max_messages or box.bytes > d.max_bytes:
            if d.policy == "drop-oldest":
                while (box.messages > d.max_messages or box.bytes > d.max_bytes) \
                        and box.messages > 1:
                    if box.drop_oldest() is None:
                        break  # the rest is in flight: its confirms come first
                    self.dropped += 1
            elif not self._alarm:
                self._alarm = True
                self.app.alarms.set_alarm(
                    f"uplink {self.name}",
                    f"uplink {self.name} outbox full ({box.messages} messages, {box.bytes} "
                    "bytes)")

    def deleted(self) -> None:
        """A confirmed record's delete was staged: commit it with its group (half a window,
        or the manager's round soon after the first)."""
        self.deleted_unsynced += 1
        if self.deleted_unsynced >= self.flush_every:
            self.flush_deletes()
        elif self.deleted_unsynced == 1:
            self.manager.flush_soon.set()

    def flush_deletes(self) -> None:
        """Have the staged deletes of confirmed messages committed now."""
        if self.deleted_unsynced:
            self.deleted_unsynced = 0
            self.app.store.kick()

    # ---------------------------------------------------------------- inbound
    async def deliver(self, topic: str, payload: bytes,
                      props: MessageProps | None = None) -> None:
        """Publish an inbound command locally through the manager (awaits its commit)."""
        await self.manager.deliver(self, topic, payload, props)

    def connected(self, endpoint: Endpoint, detail: str) -> None:
        """A link is up at ``endpoint`` (``detail``: what it negotiated, if anything)."""
        self.state, self.node = "connected", endpoint.redacted()
        self.connected_since = time.time()
        self.app.log.info("uplink %s connected to %s%s", self.name, endpoint.redacted(),
                          f" ({detail})" if detail else "")

    # ------------------------------------------------- returned and parked records
    def note_returned(self, seq: int, reason: str) -> None:
        """The upstream gave ``seq`` back: keep it, flagged, for the next retry round."""
        box = self.outbox
        first = box.returned == 0
        if not box.hold(seq, RETURNED):
            return  # dropped meanwhile (drop-oldest): nothing to keep
        self.app.store.kick()  # (the retry round reads it back from disk)
        self.returned += 1
        self.last_return = reason
        if self.retry_at is None:
            self.retry_at = trio.current_time() + self.retry_delay
        self.lot.unpark_all()  # a waiting take() learns the retry deadline
        if first:
            self.app.log.warning(
                "uplink %s: upstream returned message %d: %s; it stays in the outbox and is "
                "retried with back-off (counted in 'returned')", self.name, seq, reason)

    def retry_due(self) -> bool:
        """Whether a retry round of returned messages may hand them out now."""
        if not self.outbox.returned:
            return False
        now = trio.current_time()
        if self.retry_at is None:  # e.g. flags carried over from a previous definition
            self.retry_at = now + self.retry_delay
        return now >= self.retry_at

    def take_returned(self, room: int) -> list[OutMessage]:
        """The next returned messages of this round (unflagged: they go in flight)."""
        box = self.outbox
        batch = box.take_held(RETURNED, self.retry_cursor, room)
        if batch:
            self.retry_cursor = batch[-1].seq + 1
        if len(batch) < room or not box.returned:
            # Round over: what comes back again waits for the next one, later.
            self.retry_cursor = 0
            self.retry_delay = min(RETRY_MAX, self.retry_delay * 2)
            self.retry_at = trio.current_time() + self.retry_delay if box.returned else None
        return batch

    def retry_taken(self) -> None:
        """A retried message was confirmed: the upstream takes them again."""
        self.retry_delay = RETRY_FIRST
        if not self.outbox.returned and self.retry_at is None:
            self.last_return = ""

    def note_parked(self, seq: int, reason: str) -> None:
        """A link cannot express ``seq`` upstream: keep it, parked, unsent."""
        if self.outbox.hold(seq, PARKED):
            self.last_parked = reason
            self._warn_parked(1, f"now (message {seq}: {reason})")

    def without_refused(self, batch: list[OutMessage]) -> list[OutMessage]:
        """``batch`` minus the messages of refused topics, which are parked."""
        kept = []
        for m in batch:
            reason = self.refused.get(m.topic)
            if reason is None:
                kept.append(m)
            elif self.outbox.hold(m.seq, PARKED):
                self.last_parked = reason
        return kept

    def on_refused(self, unconfirmed: list[int], reason: str, whole_topic: bool) -> None:
        """The upstream closed the channel over one of ``unconfirmed`` (in flight then).
        ``whole_topic``: the refusal is about the routing key (403: no write permission),
        so every message of that topic is parked; otherwise (406: too large, ...) only the
        refused message is."""
        if len(unconfirmed) != 1:
            if unconfirmed:  # which one is not known: find it, one message at a time
                self.probe_until = unconfirmed[-1]
                self.app.log.warning("uplink %s: upstream refused a publish (%s); sending one "
                                     "message at a time to find it", self.name, reason)
            return
        seq = unconfirmed[0]
        topic = self.outbox.topic_of(seq)
        if self.probe_until is not None and seq >= self.probe_until:
            self.probe_until = None
        if topic is None:
            return  # dropped meanwhile
        if whole_topic:
            if len(self.refused) >= REFUSED_TOPICS_MAX:
                self.refused.clear()  # bounded: a forgotten topic is only probed again
            self.refused[topic] = reason  # e.g. "access refused by upstream: ..."
        if self.outbox.hold(seq, PARKED):
            self.last_parked = reason
            self._warn_parked(1, f"(topic {topic!r}: {reason})")

    def _warn_parked(self, n: int, where: str) -> None:
        self.app.log.warning(
            "uplink %s: %d queued message(s) cannot be sent as the uplink is defined %s; "
            "parked in the outbox (%d in all): change its protocol or prefix to send them, "
            "or `oxiedge uplink remove %s` to discard them", self.name, n, where,
            self.outbox.parked, self.name)

    async def recheck(self) -> None:
        """After a change of protocol, prefix or exchange: park what can no longer be sent,
        free what now can (returned ones are sent again at once), in chunks."""
        box = self.outbox
        seq: int | None = 0
        parked = freed = 0
        while seq is not None:
            seq, p, f = box.recheck(self.routable, seq, RECHECK_CHUNK)
            parked, freed = parked + p, freed + f
            await trio.sleep(0)
        self.retry_at, self.retry_cursor = None, 0
        self.recheck_needed = False
        if parked:
            self.last_parked = "its topic has no upstream name under the new definition"
            self._warn_parked(parked, "now")
        if freed:
            self.app.log.info("uplink %s: %d parked message(s) can be sent again", self.name,
                              freed)

    def warning(self) -> str:
        """What an operator should know about records waiting unsent ('' if none)."""
        box, parts = self.outbox, []
        if box.returned:
            due = "" if self.retry_at is None else \
                f", next retry in {max(0.0, self.retry_at - trio.current_time()):.0f} s"
            parts.append(f"{box.returned} message(s) returned by the upstream ("
                         f"{self.last_return}){due}")
        if box.parked:
            why = self.last_parked or "no upstream name"
            parts.append(f"{box.parked} message(s) parked: {why}")
        return "; ".join(parts)

    def after_removal(self) -> None:
        """Clear the ``block`` alarm once the outbox is back under its bounds."""
        if self._alarm:
            d, box = self.definition, self.outbox
            if box.messages <= d.max_messages and box.bytes <= d.max_bytes:
                self.clear_alarm()

    def clear_alarm(self) -> None:
        """Lift this uplink's ``block`` alarm, if raised."""
        if self._alarm:
            self._alarm = False
            self.app.alarms.set_alarm(f"uplink {self.name}", None)

    # --------------------------------------------------------------- the task
    def stop(self) -> None:
        """Stop the task; what its connection had in flight goes back to the outbox now,
        before a successor (a changed definition keeps the outbox) takes from it."""
        self.scope.cancel()
        self.clear_alarm()  # now, not when the task unwinds (a successor may raise it)
        if self.conn is not None:
            self.conn.close()

    async def run(self) -> None:
        with self.scope:
            try:
                await self._run()
            finally:
                self.clear_alarm()
                if self.conn is not None:
                    self.conn.close()

    async def _run(self) -> None:
        log = self.app.log
        if self.recheck_needed:
            await self.recheck()
        failures = 0
        index = 0
        while True:
            endpoint = self.endpoints[index % len(self.endpoints)]
            index += 1
            self.state, self.node = "connecting", endpoint.redacted()
            conn = self.conn = UplinkConnection(self)
            try:
                await _runner(self.protocol)(endpoint, self.options, conn)
                reason = "link ended"
            except PublishRefused as exc:
                reason = str(exc)
                self.on_refused(exc.unconfirmed, reason, exc.code == ACCESS_REFUSED)
            except LinkError as exc:
                reason = str(exc) or type(exc).__name__
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                reason = f"{type(exc).__name__}: {exc}"
            except CommitError as exc:  # the local store failed: nothing is acked either
                reason = f"local store: {exc}"
            except Exception as exc:  # a bug in a link must not stop the uplink for good
                reason = f"internal error: {exc!r}"
                log.exception("uplink %s: link failed", self.name)
            self.last_error = reason
            self.connected_since = None
            self.conn = None
            conn.close()  # (after ``on_refused``, which sets the refused one aside)
            where = endpoint.redacted()
            said = reason.removeprefix(f"{where}: ")  # (a link error names its URL too)
            if conn.up_at is not None:
                self.reconnects += 1
                log.warning("uplink %s lost %s: %s", self.name, where, said)
                failures = 0 if time.monotonic() - conn.up_at > 10 else failures
            elif failures == 0 or failures % 10 == 0:
                log.warning("uplink %s cannot connect to %s: %s", self.name, where, said)
            failures += 1
            self.state = "backoff"
            if index % len(self.endpoints):
                await trio.sleep(0.05)  # try the cluster's next node at once
                continue
            rounds = failures // len(self.endpoints)
            delay = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** max(0, rounds - 1))
            await trio.sleep(delay * random.uniform(0.5, 1.0))

    # ----------------------------------------------------------------- status
    def tick(self, now: float) -> None:
        """Update the forwarding rate (confirmed messages per second, smoothed)."""
        last_t, last_n = self._rate_last
        if now - last_t >= 1.0:
            current = (self.confirmed - last_n) / (now - last_t)
            self.rate = current if self.rate == 0 else 0.5 * self.rate + 0.5 * current
            self._rate_last = (now, self.confirmed)

    def status(self) -> dict[str, Any]:
        box = self.outbox
        return {
            "state": self.state, "node": self.node, "protocol": self.protocol,
            "source": self.definition.source,
            "backlog_messages": box.messages, "backlog_bytes": box.bytes,
            "inflight": len(self.conn.inflight) if self.conn is not None else 0,
            "enqueued": self.enqueued, "forwarded": self.forwarded,
            "confirmed": self.confirmed, "resent": self.resent, "dropped": self.dropped,
            "skipped": self.skipped, "returned": self.returned,
            "returned_waiting": box.returned, "retried": self.retried, "parked": box.parked,
            "warning": self.warning(), "received": self.received,
            "lag_seconds": round(box.oldest_age(), 3), "rate": round(self.rate, 1),
            "last_error": self.last_error, "reconnects": self.reconnects,
            "connected_since": None if self.connected_since is None else time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.connected_since)),
            "blocking": self._alarm,
        }

"""The unacked deliveries of one channel and their settlement: ``basic.ack``, ``basic.nack``
/ ``basic.reject`` (requeued at the head, dead-lettered or dropped), ``basic.recover`` and
the release of a closing channel (everything back to its queues).

:class:`Settlement` owns the delivery tags, the map of unacked deliveries and the channel's
``global`` prefetch (basic.qos global=true limits the channel's unacked count as a whole).
Every settlement of a channel goes through it (``Channel.settlement``); a transactional
channel's acks, nacks and rejects are held by its ``transaction.Transaction`` and reach it
at the commit (:meth:`Settlement.settle`).  A settled delivery gives credit back
to its consumer: its queue (or, past a channel-wide bound, every queue the channel consumes
from) dispatches again.

Methods return flags (``channel.py``'s module docstring): :data:`KICK` (durable deletes
were staged) and :data:`UNSYNCED` (make them durable before the next synchronous reply).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from typing import TYPE_CHECKING, Protocol

from oxiedge.amqp import deadletter, persist
from oxiedge.amqp.constants import PRECONDITION_FAILED
from oxiedge.amqp.errors import AmqpError

if TYPE_CHECKING:
    from oxiedge.amqp.broker import Broker
    from oxiedge.amqp.queued import QueuedMessage
    from oxiedge.amqp.queues import Queue

#: Durable deletes were staged: have a commit round soon (nobody waits for it).
KICK = 1
#: ... and make them durable before the reply to the next synchronous method.
UNSYNCED = 2


class Debtor(Protocol):
    """Who got a delivery (a ``consumers.Consumer``): it counts its unacked deliveries."""

    unacked: int


class Consumers(Protocol):
    """The channel's consumers (``consumers.ConsumerSet``), woken when credit returns."""

    def dispatch_all(self) -> None: ...


#: An unacked delivery: (queue, message, consumer or None for basic.get).
Unacked = tuple["Queue", "QueuedMessage", "Debtor | None"]


class Settlement:
    """The unacked deliveries of one channel (see the module docstring)."""

    __slots__ = ("_broker", "_consumers", "global_prefetch", "global_unacked", "limit",
                 "next_tag", "unacked")

    def __init__(self, broker: Broker, consumers: Consumers, limit: int) -> None:
        self._broker = broker
        self._consumers = consumers  # the channel's: dispatched again when credit returns
        #: delivery tag -> delivery; tags grow, so the dict is in tag order.
        self.unacked: dict[int, Unacked] = {}
        self.next_tag = 0  # the last delivery tag given (consumers and basic.get share them)
        #: Unacked deliveries of the channel never exceed this, prefetch or not.
        self.limit = limit
        self.global_prefetch = 0  # basic.qos global=true: shared by the channel's consumers
        self.global_unacked = 0  # unacked deliveries of the channel's consumers

    # -- delivering --------------------------------------------------------------------
    # (``Consumer.deliver`` does the same bookkeeping inline: it runs once per message.)

    def has_room(self) -> bool:
        """May the channel take one more delivery that waits for an ack?"""
        if len(self.unacked) >= self.limit:
            return False  # bound memory even for consumers without prefetch that never ack
        return not self.global_prefetch or self.global_unacked < self.global_prefetch

    def track_get(self, queue: Queue, msg: QueuedMessage, no_ack: bool) -> int:
        """A basic.get-ok: its delivery tag; tracked until acked unless ``no_ack``."""
        self.next_tag += 1
        tag = self.next_tag
        if not no_ack:
            self.unacked[tag] = (queue, msg, None)
            queue.unacked += 1
        return tag

    def set_global_prefetch(self, count: int) -> None:
        """basic.qos global=true: the channel's consumers share ``count`` unacked."""
        self.global_prefetch = count
        self._consumers.dispatch_all()

    # -- settling ------------------------------------------------------------------------

    def ack(self, tag: int, multiple: bool) -> int:
        """basic.ack: delete the durable records by (queue, seq); returns flags."""
        if not multiple:
            return self._ack_one(tag)
        was_capped, settled, touched = self._take(tag, multiple)
        flags = self._forget_acked(settled)
        self._dispatch_after(was_capped, touched)
        return flags

    def _ack_one(self, tag: int) -> int:
        """``ack(tag, multiple=False)``, the common case, without the lists of ``_take``."""
        unacked = self.unacked
        # At the channel's unacked bound every consumer of the channel was held back.
        was_capped = len(unacked) >= self.limit
        entry = unacked.pop(tag, None)
        if entry is None:
            raise AmqpError(PRECONDITION_FAILED, f"unknown delivery tag {tag}")
        credited = self._settle(entry)
        owner, msg, _consumer = entry
        broker = self._broker
        flags = 0
        if msg.stored:
            broker.forget(owner, msg)
            flags = KICK | UNSYNCED
        broker.counters["acked"] += 1
        self._dispatch_after(was_capped, () if credited is None else (credited,))
        return flags

    def settle(self, tags: list[int], requeue: bool | None) -> int:
        """Settle exactly ``tags``: acked (``requeue`` None), else rejected with
        ``requeue``; returns flags.  A transaction's commit (``transaction.py``), which
        checked the tags when it held them; one no longer unacked (a ``basic.recover``
        came in between) is skipped."""
        unacked = self.unacked
        was_capped = len(unacked) >= self.limit
        settled = [unacked.pop(t) for t in tags if t in unacked]
        touched: set[Queue] = set()
        for entry in settled:
            queue = self._settle(entry)
            if queue is not None:
                touched.add(queue)
        if requeue is None:
            flags = self._forget_acked(settled)
        else:
            flags = self._settle_rejected(settled, requeue)
        self._dispatch_after(was_capped, touched)
        return flags

    def nack(self, tag: int, multiple: bool, requeue: bool) -> int:
        """basic.nack / basic.reject: requeue at the head (redelivered) or discard."""
        was_capped, settled, touched = self._take(tag, multiple)
        flags = self._settle_rejected(settled, requeue)
        self._dispatch_after(was_capped, touched)
        return flags

    def recover(self, reply: Callable[[], None]) -> int:
        """basic.recover requeue=true: every unacked delivery back to its queue; ``reply``
        goes out before the redeliveries."""
        was_capped, settled, touched = self._take(0, True)
        flags = self._settle_rejected(settled, requeue=True)
        reply()
        self._dispatch_after(was_capped, touched)
        return flags

    def release(self) -> int:
        """The channel is gone (its consumers already cancelled): every unacked delivery
        back to its queue; returns flags."""
        if not self.unacked:
            return 0
        settled = list(self.unacked.values())
        self.unacked.clear()
        for queue, _msg, owner in settled:
            queue.unacked -= 1
            if owner is not None:
                owner.unacked -= 1
        self.global_unacked = 0
        return self._settle_rejected(settled, requeue=True)

    # -- the parts -----------------------------------------------------------------------

    def tags_of(self, tag: int, multiple: bool, held: Container[int] = ()) -> list[int]:
        """The unacked delivery tags ``tag`` names (``multiple``: up to it; 0: all), less
        those in ``held`` (a transaction's); 406 for a tag that names none."""
        unacked = self.unacked
        if not multiple:
            if tag not in unacked or tag in held:
                raise AmqpError(PRECONDITION_FAILED, f"unknown delivery tag {tag}")
            return [tag]
        if tag == 0 and not held:
            return list(unacked)
        tags = []
        for t in unacked:  # (in tag order)
            if tag and t > tag:
                break
            if t not in held:
                tags.append(t)
        if not tags and tag != 0:
            raise AmqpError(PRECONDITION_FAILED, f"unknown delivery tag {tag}")
        return tags

    def _take(self, tag: int, multiple: bool) -> tuple[bool, list[Unacked], set[Queue]]:
        """Remove the deliveries ``tag`` names (``multiple``: up to it; 0: all) from the
        unacked set: whether the channel was at its bound, the deliveries, and the queues
        whose consumers got credit back."""
        unacked = self.unacked
        tags = self.tags_of(tag, multiple)
        # At the channel's unacked bound every consumer of the channel was held back.
        was_capped = len(unacked) >= self.limit
        out = [unacked.pop(t) for t in tags]
        touched: set[Queue] = set()
        for entry in out:
            queue = self._settle(entry)
            if queue is not None:
                touched.add(queue)
        return was_capped, out, touched

    def _settle(self, entry: Unacked) -> Queue | None:
        """One delivery leaves the unacked set: the counts; its queue if a consumer's
        credit came back (that queue may deliver again)."""
        queue, _msg, consumer = entry
        queue.unacked -= 1
        if consumer is None:
            return None
        consumer.unacked -= 1
        self.global_unacked -= 1
        return queue

    def _forget_acked(self, settled: list[Unacked]) -> int:
        """Acked deliveries: their durable records are deleted; returns flags."""
        broker = self._broker
        flags = 0
        for queue, msg, _consumer in settled:
            if msg.stored:
                broker.forget(queue, msg)
                flags = KICK | UNSYNCED
        broker.counters["acked"] += len(settled)
        return flags

    def _dispatch_after(self, was_capped: bool, touched: Iterable[Queue]) -> None:
        if self.global_prefetch or was_capped:
            self._consumers.dispatch_all()
        else:
            for q in touched:
                q.dispatch()

    def _settle_rejected(self, settled: list[Unacked], requeue: bool) -> int:
        broker = self._broker
        flags = 0
        if requeue:
            by_queue: dict[Queue, list[QueuedMessage]] = {}
            for queue, msg, _c in settled:
                by_queue.setdefault(queue, []).append(msg)
            for queue, msgs in by_queue.items():
                if queue.deleted:
                    for m in msgs:
                        broker.forget(queue, m)
                    flags |= KICK
                    continue
                if queue.delivery_limit is not None:
                    msgs, counted = self._count_returns(queue, msgs)
                    flags |= counted
                queue.requeue(msgs)
            broker.counters["requeued"] += len(settled)
        else:
            for queue, msg, _c in settled:
                if queue.dlx is not None and not queue.deleted:
                    # basic.reject / basic.nack requeue=false: dead-lettered (RabbitMQ dlx)
                    broker.dead_letter(queue, msg, deadletter.REJECTED)
                    flags |= KICK | UNSYNCED
                elif msg.stored:
                    broker.forget(queue, msg)
                    flags |= KICK
            broker.counters["discarded"] += len(settled)
        return flags

    def _count_returns(self, queue: Queue, msgs: list[QueuedMessage]
                       ) -> tuple[list[QueuedMessage], int]:
        """Quorum-queue poison-message handling: every return of a delivered message
        (nack/reject with requeue, a closed channel, recover) counts; the redelivery
        carries ``x-delivery-count``; past ``x-delivery-limit`` the message is
        dead-lettered (reason ``delivery_limit``) or, without a DLX, dropped and counted.
        Only queues with a limit pay for this (one decode per return); returns the messages
        to requeue and flags."""
        broker = self._broker
        limit = queue.delivery_limit
        assert limit is not None
        back: list[QueuedMessage] = []
        flags = 0
        for msg in msgs:
            count = deadletter.delivery_count_of(msg.properties) + 1
            if count > limit:
                broker.counters["delivery_limit"] += 1
                broker.dead_letter(queue, msg, deadletter.DELIVERY_LIMIT)
                flags |= KICK | UNSYNCED
                continue
            msg.properties = deadletter.with_delivery_count(msg.properties, count)
            if msg.stored is True:  # the count survives a restart with the message
                broker.store_message(queue, msg, persist.encode_record(
                    msg.exchange, msg.routing_key, msg.properties, msg.body, msg.expires))
                broker.counters["persisted"] -= 1
                flags |= KICK | UNSYNCED
            back.append(msg)
        return back, flags

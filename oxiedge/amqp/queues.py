"""Queues and their consumers; round-robin dispatch (the message type is in ``queued.py``).

Theory of operation
-------------------
A :class:`Queue` holds its *ready* messages in a deque (head = next to deliver) and its
consumers in a list.  :meth:`Queue.dispatch` runs synchronously whenever something could
let a delivery happen (a message arrives, a consumer is added, an ack frees prefetch
credit, a connection's send buffer drains): it walks the consumers round-robin from where
it stopped last time, skipping any consumer that has no credit (its own prefetch, its
channel's ``global`` prefetch, a paused channel, or a connection whose send buffer is
full), and hands each ready message to the next one with credit.  So an idle consumer is
woken by the event that gave it work, never by polling, and a slow consumer is bounded by
its prefetch or its socket buffer.

A message routed to several queues becomes one :class:`QueuedMessage` per queue, each with
that queue's ``seq`` (the durable key is ``(queue id, seq)``); properties and body bytes
are shared.  Unacked messages live in their channel's settlement (``settlement.py``), not
here; the queue only counts them.
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from oxiedge.amqp.queued import QueueConsumer, QueuedMessage, ReadyLog
from oxiedge.amqp.selection import RankedSelection, SingleActive, insert_ranked

if TYPE_CHECKING:
    from oxiedge.amqp.selection import Selector
    from oxiedge.amqp.timers import QueueTimers


#: Expiry runs in rounds, so that a deep queue whose messages are all due does not hold the
#: event loop (every connection waits while one synchronous call runs). A round spends at
#: most ``EXPIRE_ROUND``, in records of a queue log removed unread (``LogReady.expire_unread``,
#: about 2.5 µs each on the 2-core VM, ~10 ms a round); a message expired one at a time costs
#: ``EXPIRE_EACH`` of them (in memory or in the window: about twice the work), one
#: dead-lettered ``EXPIRE_DEAD`` (rewritten with x-death and published: 256 a round). A
#: round that runs out leaves the head due, so ``arm`` asks for the timer at once, and the
#: timer task lets every other task run before it fires again (``timers.py``);
#: ``expiry_rounds_cut`` counts those rounds.
EXPIRE_ROUND = 4096
EXPIRE_EACH = 2
EXPIRE_DEAD = 16


class Queue:
    """An AMQP queue (vhost ``/``)."""

    # Slotted: with more than 30 instance attributes CPython stops sharing the instance
    # dict's keys and every attribute access on the hot path gets slower (measured +25 ns
    # per message through enqueue + dispatch).
    __slots__ = ("_dispatching", "_fresh", "_rr", "arguments", "auto_delete", "clock",
                 "consumer_timeout_ms", "consumers", "dead_lettered", "deleted", "delivered",
                 "delivery_limit", "dlrk", "dlx", "doc_id", "dropped", "durable",
                 "exclusive_owner", "expired", "expires_ms", "had_consumer", "last_used", "limit",
                 "max_bytes", "message_ttl", "name", "next_seq", "on_drop", "on_expire",
                 "on_unused", "overflow", "paged", "plain", "published", "qid", "queue_type",
                 "ready", "ready_bytes", "reject_publish", "rejected", "selector", "sources",
                 "timer_at", "timers", "ttl_seen", "unacked")  # fmt: skip

    def __init__(
        self,
        name: str,
        qid: int,
        *,
        durable: bool = False,
        exclusive_owner: object | None = None,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
        limit: int = 100_000,
        on_drop: Callable[[Queue, QueuedMessage], None] | None = None,
        on_expire: Callable[[Queue, QueuedMessage], None] | None = None,
        on_unused: Callable[[Queue], None] | None = None,
        timers: QueueTimers | None = None,
    ) -> None:
        self.name = name
        self.qid = qid
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments = arguments or {}
        self.limit = limit
        self.on_drop = on_drop
        self.on_expire = on_expire
        self.on_unused = on_unused
        self.timers = timers
        #: The broker's clock (QueueTimers.clock): deadlines and x-expires leases.
        self.clock: Callable[[], float] = timers.clock if timers is not None else time.time
        self.expired = 0
        self.rejected = 0
        self.reject_publish = False  # x-overflow=reject-publish (else drop-head)
        self.message_ttl: int | None = None  # x-message-ttl, ms
        # -- RabbitMQ's production arguments (broker._configure sets them) --------------
        #: False when the queue has an argument that publishing must look at (TTL, byte
        #: limit, overflow other than drop-head): plain queues keep the lean publish path.
        self.plain = True
        self.overflow = "drop-head"  # x-overflow
        self.max_bytes: int | None = None  # x-max-length-bytes (ready bodies); None = no
        self.ready_bytes = 0  # maintained only when max_bytes is set
        self.dlx: str | None = None  # x-dead-letter-exchange ("" = the default exchange)
        self.dlrk: str | None = None  # x-dead-letter-routing-key
        self.delivery_limit: int | None = None  # x-delivery-limit (quorum semantics)
        self.queue_type = "classic"
        self.expires_ms: int | None = None  # x-expires: deleted after this long unused
        self.last_used = self.clock()
        self.ttl_seen = False  # a message with a deadline has been here: keep a timer
        self.timer_at = 0.0  # the pending timer (QueueTimers), 0 = none
        self.dead_lettered = 0
        self.ready: deque[QueuedMessage] = deque()
        self.consumers: list[QueueConsumer] = []
        #: Picks the consumer of each message when it is not round-robin: consumer
        #: priorities, single active consumer (``selection.py``).
        self.selector: Selector | None = None
        self.consumer_timeout_ms: int | None = None  # x-consumer-timeout (acktimeout.py)
        #: names of the exchanges with a binding to this queue (kept by ``Exchange``)
        self.sources: set[str] = set()
        self.next_seq = 1
        self.unacked = 0
        self.dropped = 0
        self.delivered = 0
        self.published = 0
        self.deleted = False
        self.had_consumer = False
        self.doc_id: int | None = None  # _amqp document of a durable queue
        self.paged: ReadyLog | None = None  # ``ready`` on a queue log (``queuelog.py``)
        self._rr = 0
        self._dispatching = False
        self._fresh: QueuedMessage | None = None

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    def take_seq(self) -> int:
        seq = self.next_seq
        self.next_seq = seq + 1
        return seq

    def enqueue(self, msg: QueuedMessage) -> None:
        """Append a message; beyond ``limit`` ready messages the oldest is dropped."""
        ready = self.ready
        if len(ready) >= self.limit:
            if not ready:  # x-max-length=0: nothing is ever kept
                self.dropped += 1
                if self.on_drop is not None:
                    self.on_drop(self, msg)
                return
            old = ready.popleft()
            if self.max_bytes is not None:
                self.ready_bytes -= len(old.body)
            self.dropped += 1
            if self.on_drop is not None:
                self.on_drop(self, old)
        ready.append(msg)
        self.published += 1
        if self.consumers:
            # A consumer that can take the message during this very dispatch gets it even
            # with a TTL of 0 (RabbitMQ: "expires unless it can be delivered immediately").
            self._fresh = msg
            self.dispatch()
            self._fresh = None

    def _over_bytes(self, msg: QueuedMessage) -> None:
        """Count ``msg``'s body; with drop-head, drop from the head until the ready bodies
        fit x-max-length-bytes.  (Dispatch may already have taken ``msg`` and subtracted
        its size: adding it now keeps the sum right.)"""
        self.ready_bytes += len(msg.body)
        ready = self.ready
        while self.ready_bytes > self.max_bytes and ready:  # type: ignore[operator]
            old = ready.popleft()
            self.ready_bytes -= len(old.body)
            self.dropped += 1
            if old is msg:
                self.published -= 1
            if self.on_drop is not None:
                self.on_drop(self, old)

    def saw_deadline(self) -> None:
        """A message with a deadline was enqueued (callers know; enqueue stays lean)."""
        self.ttl_seen = True
        self.arm()

    def would_overflow(self, size: int) -> bool:
        """Would one more message of ``size`` body bytes exceed a length limit (or, on a
        queue log, --max-backlog-bytes)?"""
        paged = self.paged
        if len(self.ready) >= self.limit or (paged is not None and paged.over_budget(size)):
            return True
        return self.max_bytes is not None and self.ready_bytes + size > self.max_bytes

    def arm(self) -> None:
        """Ask for the one timer this queue needs (head expiry, x-expires)."""
        timers = self.timers
        if timers is None or self.deleted:
            return
        at = self._head_expires()
        if self.expires_ms is not None and not self.consumers:
            idle = self.last_used + self.expires_ms / 1000
            at = min(at, idle) if at else idle
        if at:
            timers.schedule(self, at)

    def _head_expires(self) -> float:
        """The head's deadline (0: none); on a queue log its head alone, no window read."""
        if self.paged is not None:
            return self.paged.head_expires() if self.ttl_seen else 0.0
        return self.ready[0].expires if self.ready else 0.0

    def on_timer(self) -> None:
        """A timer fired: expire the head, delete the queue if unused too long, re-arm."""
        if self.deleted:
            return
        if (self.expires_ms is not None and not self.consumers
                and self.clock() >= self.last_used + self.expires_ms / 1000
                and self.on_unused is not None):
            self.on_unused(self)
            return
        if self.expire_head() and self.consumers:
            self.dispatch()  # (a dispatch may have stopped at an expired run: what follows)
        self.arm()

    def touch(self) -> None:
        """The queue was used (declare, get, consumer gone): restart its x-expires lease."""
        self.last_used = self.clock()
        if self.expires_ms is not None:
            self.arm()

    def requeue(self, msgs: list[QueuedMessage]) -> None:
        """Put unacked messages back in their original place (by ``seq``), redelivered, as
        RabbitMQ: nacks of 2, 3, 4, 5 one by one find them again as 2, 3, 4, 5.  Only the
        head holding older messages is merged; a few messages are each put in place by
        bisection (30,000 rejects one by one used to re-merge the requeued head every
        time, quadratic: 55 s of event loop)."""
        if not msgs:
            return
        for msg in msgs:
            msg.redelivered = True
        msgs.sort(key=_seq_of)
        ready = self.ready
        if self.max_bytes is not None:
            self.ready_bytes += sum(len(m.body) for m in msgs)
        last = msgs[-1].seq
        if self.paged is not None:
            self.paged.put_back(msgs)
        elif len(msgs) <= _BISECT_MAX:
            for msg in msgs:
                if not ready or ready[0].seq > msg.seq:
                    ready.appendleft(msg)
                elif ready[-1].seq < msg.seq:
                    ready.append(msg)
                else:  # deque indexing and insert run in C: no Python loop over ready
                    ready.insert(bisect.bisect_left(ready, msg.seq, key=_seq_of), msg)
        else:
            head: list[QueuedMessage] = []
            while ready and ready[0].seq < last:
                head.append(ready.popleft())
            if head:
                msgs = sorted(head + msgs, key=_seq_of)
            ready.extendleft(reversed(msgs))
        if self.consumers:
            self.dispatch()
        if self.ttl_seen:
            self.arm()

    def dispatch(self) -> None:
        """Deliver ready messages round-robin to consumers with credit."""
        if self._dispatching or self.deleted:
            return
        budget = EXPIRE_ROUND  # (one round for all the expiry it meets)
        if self.paged is not None and self.ttl_seen and self._fresh is None:
            budget = self.expire_round(budget)
            if budget < 0:
                return  # an expired run goes first, unread (the timer dispatches after it)
        self._dispatching = True
        try:
            if self.selector is not None:
                self._dispatch_selected(self.selector, budget)
                return
            ready = self.ready
            consumers = self.consumers
            count_bytes = self.max_bytes is not None
            while ready and consumers:
                n = len(consumers)
                start = self._rr
                for i in range(n):
                    consumer = consumers[(start + i) % n]
                    if consumer.has_credit():
                        self._rr = (start + i + 1) % n
                        break
                else:
                    return  # everybody is at its limit; an ack or a drain calls us again
                msg = ready.popleft()
                if count_bytes:
                    self.ready_bytes -= len(msg.body)
                if msg.expires and msg is not self._fresh and msg.expires <= self.clock():
                    budget = self._expire_met(msg, budget)
                    if budget >= 0:
                        continue
                    return
                self.delivered += 1
                consumer.deliver(msg)
        finally:
            self._dispatching = False
            if self.ttl_seen:
                self.arm()

    def _dispatch_selected(self, selector: Selector, budget: int) -> None:
        """``dispatch`` with the consumer of each message picked by ``selector``."""
        ready = self.ready
        consumers = self.consumers
        while ready and consumers:
            consumer = selector.pick(consumers)
            if consumer is None:
                return  # an ack, a drain or a new consumer calls us again
            msg = ready.popleft()
            if self.max_bytes is not None:
                self.ready_bytes -= len(msg.body)
            if msg.expires and msg is not self._fresh and msg.expires <= self.clock():
                budget = self._expire_met(msg, budget)
                if budget >= 0:
                    continue
                return
            self.delivered += 1
            consumer.deliver(msg)

    def _expire_met(self, msg: QueuedMessage, budget: int) -> int:
        """Dispatch met ``msg`` expired: expire it, and on a queue log the run behind it as
        ``expire_head`` does (unread on disk where it can, not read back for dispatch one
        by one), from the dispatch's round ``budget``: what is left of it, or -1 when it is
        spent and dispatch stops (the timer goes on at once, then dispatches: ``on_timer``)."""
        self._expire(msg)
        budget -= self._expire_cost()
        if budget <= 0:
            return self._cut()
        # (not with ``_fresh``: a TTL of 0 at the head goes to a consumer, it is not expired)
        return budget if self.paged is None or self._fresh is not None else (
            self.expire_round(budget))

    def add_consumer(self, consumer: QueueConsumer) -> None:
        """A new consumer: last in turn; by priority where consumers have priorities."""
        if self.paged is not None:
            self.expire_head()  # (an expired run on disk goes unread, not one by one)
        if self.selector is None:
            if not consumer.priority:
                self.consumers.append(consumer)
                return
            self.selector = RankedSelection()
        insert_ranked(self.consumers, consumer)

    def _expire(self, msg: QueuedMessage) -> None:
        self.expired += 1
        if self.on_expire is not None:
            self.on_expire(self, msg)

    def _expire_cost(self) -> int:
        """What expiring one message at a time costs of a round (``EXPIRE_ROUND``)."""
        return EXPIRE_EACH if self.dlx is None else EXPIRE_DEAD

    def _cut(self) -> int:
        """An expiry round spent its budget with the head still due: go on at once (after
        every other task has run); -1, for the caller to return."""
        if self.timers is not None:
            self.timers.rounds_cut += 1
        self.arm()
        return -1

    def pop_ready(self) -> QueuedMessage | None:
        """The next live message for basic.get. The expired ones at the head go first, one
        round at most (``expire_head``): behind a longer expired run there is none now
        (get-empty; the timer goes on with the run, a later get finds what follows)."""
        ready = self.ready
        self.touch()
        if not self.expire_head():
            return None
        while ready:  # (its head was not due when expire_head looked)
            msg = ready.popleft()
            if self.max_bytes is not None:
                self.ready_bytes -= len(msg.body)
            if msg.expires and msg.expires <= self.clock():
                self._expire(msg)
                continue
            if self.ttl_seen:
                self.arm()
            return msg
        return None

    def expire_head(self) -> bool:
        """Discard expired messages at the head (RabbitMQ expires a message only once it
        reaches the head of its queue; declare-ok and purge-ok counts then exclude them),
        one round at most (``EXPIRE_ROUND``). True: the head is not due (or there is none);
        False: the round's budget ran out first (``_cut``)."""
        return self.expire_round(EXPIRE_ROUND) >= 0

    def expire_round(self, budget: int) -> int:
        """``expire_head`` with ``budget`` left of the round: what is left, -1 if it ran out."""
        ready, now, paged, each = self.ready, 0.0, self.paged, self._expire_cost()
        if paged is not None:  # its head alone until one is due; without a DLX an expired
            now = self.clock()  # run on disk goes unread (``queuelog.LogReady``)
            while 0 < self._head_expires() <= now:
                if budget < each:
                    return self._cut()
                n, size = paged.expire_unread(now, budget) if self.dlx is None else (0, 0)
                if n:
                    budget -= n
                    self.expired += n
                    self.ready_bytes -= size if self.max_bytes is not None else 0
                    continue
                budget -= each
                msg = ready.popleft()  # (in the window, or read back: a DLX needs it)
                self.ready_bytes -= len(msg.body) if self.max_bytes is not None else 0
                self._expire(msg)
            return budget
        while ready and ready[0].expires:
            now = now or self.clock()
            if ready[0].expires > now:
                return budget
            if budget < each:
                return self._cut()
            budget -= each
            msg = ready.popleft()
            if self.max_bytes is not None:
                self.ready_bytes -= len(msg.body)
            self._expire(msg)
        return budget

    def remove_consumer(self, consumer: QueueConsumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
            if type(self.selector) is SingleActive:
                self.selector.removed(consumer)
            if not self.consumers and self.expires_ms is not None:
                self.touch()

    # -- what the rest of the broker sees of the ready messages ----------------------------
    def ready_count(self) -> int:
        """Messages ready to deliver (expired ones not yet at the head count too)."""
        return len(self.ready)

    def purge_ready(self, forget: Callable[[QueuedMessage], None]) -> int:
        """Drop every ready message (``forget`` each stored one's record); how many."""
        ready = self.ready
        self.ready_bytes = 0
        if self.paged is not None:
            return self.paged.purge()
        count = len(ready)
        for msg in ready:
            if msg.stored:
                forget(msg)
        ready.clear()
        return count

    def drop_ready(self) -> None:
        """The queue is deleted: let go of its ready messages (their records go with the
        queue's key range)."""
        if self.paged is not None:
            self.paged.drop()
        else:
            self.ready.clear()
        self.ready_bytes = 0

    def row(self) -> dict[str, Any]:
        """The admin/CLI row for ``oxiedge queues``."""
        return {
            "name": self.name, "durable": self.durable, "exclusive": self.exclusive,
            "auto_delete": self.auto_delete, "ready": self.ready_count(),
            "unacked": self.unacked, "consumers": len(self.consumers),
            "dropped": self.dropped, "expired": self.expired, "rejected": self.rejected,
            "dead_lettered": self.dead_lettered, "type": self.queue_type,
            "limit": self.limit, "published": self.published, "delivered": self.delivered,
            "arguments": self.arguments,
        }  # fmt: skip


#: Requeues of at most this many messages bisect each into place; larger ones merge.
_BISECT_MAX = 16


def _seq_of(msg: QueuedMessage) -> int:
    return msg.seq


class ByteLimitedQueue(Queue):
    """A queue with ``x-max-length-bytes``: only these count their ready body bytes, so
    plain queues pay nothing for the feature."""

    __slots__ = ()

    def enqueue(self, msg: QueuedMessage) -> None:
        super().enqueue(msg)
        if self.limit:  # (x-max-length=0 dropped msg without taking it)
            self._over_bytes(msg)

"""AMQP transactions (the ``tx`` class) as RabbitMQ runs them: a batch, not ACID.

Theory of operation
-------------------
After ``tx.select`` a channel's ``basic.publish``, ``basic.ack``, ``basic.nack`` and
``basic.reject`` are *held* by its :class:`Transaction` instead of taking effect.  What can
be checked at once is (RabbitMQ's "error detection: immediate"): the exchange exists and
may be written to (``burst.py`` checks before it holds), a delivery tag is unacked and not
already settled in this transaction (406 otherwise).  Nothing else happens: the publish is
routed nowhere, the acked delivery stays unacked (it keeps counting toward the prefetch).

``tx.commit`` (:meth:`Transaction.commit`) routes the held publishes in their order, then
applies the held settlements through the channel's ``Settlement``, all in one synchronous
step: the durable records they stage (message records, deletes) go into the same commit
round, and ``commit-ok`` is sent only once that round is synced (``channel.after``): a
committed transaction survives a power cut whole; one not committed leaves no trace,
because nothing of it was ever staged.  A mandatory publish nobody routes is returned at
the commit (RabbitMQ 3.x+).  ``tx.rollback`` drops what is held: a rolled-back ack leaves
its message unacked on the channel (not requeued; ``basic.recover`` or closing the channel
does that).  Closing the channel drops the transaction the same way.

Bounds (``bounds.ConnectionBounds.check_tx``): what one transaction holds (publishes plus
settled delivery tags, and the held publishes' bytes) is limited by ``--amqp-tx-max-messages``
and ``--amqp-tx-max-bytes``; past them the channel is closed with 406 and the transaction
dropped (``tx_limit_refused``).  RabbitMQ has no such bound; an unbounded transaction would
hold the whole batch in memory.

A channel is transactional or in confirm mode, never both (406 either way, as RabbitMQ).
Only channels that selected ``tx`` pay anything: ``Channel.tx`` is ``None`` otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from oxiedge.amqp import spec
from oxiedge.amqp.codec import encode_content
from oxiedge.amqp.constants import NO_ROUTE, PRECONDITION_FAILED
from oxiedge.amqp.errors import AmqpError
from oxiedge.staged import COMMIT as STAGED
from oxiedge.staged import RETURNED

if TYPE_CHECKING:
    from oxiedge.amqp.bounds import ConnectionBounds
    from oxiedge.amqp.exchanges import Exchange
    from oxiedge.amqp.ports import ChannelOwner
    from oxiedge.amqp.settlement import Settlement


class HeldPublish(NamedTuple):
    """A ``basic.publish`` held until the commit (checked already)."""

    exchange: Exchange
    routing_key: str
    properties: bytes
    body: bytes
    persistent: bool
    expiration: str | None
    mandatory: bool


#: A held settlement: the delivery tags it names, and ``None`` for an ack or the
#: ``requeue`` flag of a nack / reject.
HeldSettlement = tuple[list[int], "bool | None"]


class Transaction:
    """What one transactional channel holds until ``tx.commit`` (module docstring)."""

    __slots__ = ("_bounds", "_settlement", "held_bytes", "held_tags", "publishes",
                 "settlements")

    def __init__(self, settlement: Settlement, bounds: ConnectionBounds) -> None:
        self._settlement = settlement
        self._bounds = bounds
        self.publishes: list[HeldPublish] = []
        self.settlements: list[HeldSettlement] = []
        self.held_tags: set[int] = set()  # delivery tags settled in this transaction
        self.held_bytes = 0  # bodies and properties of the held publishes

    @property
    def held(self) -> int:
        """Held publishes and settled delivery tags (what ``--amqp-tx-max-messages``
        bounds)."""
        return len(self.publishes) + len(self.held_tags)

    def hold_publish(self, publish: HeldPublish) -> None:
        """A checked ``basic.publish`` waits for the commit (406 past the bounds)."""
        expiration = publish.expiration
        if expiration is not None and not (expiration.isascii() and expiration.isdigit()):
            # Refused now, not at the commit: a commit never stops half-way.
            raise AmqpError(PRECONDITION_FAILED, f"invalid expiration '{expiration}'", 60, 40)
        size = self.held_bytes + len(publish.body) + len(publish.properties)
        self._bounds.check_tx(self.held + 1, size)
        self.publishes.append(publish)
        self.held_bytes = size

    def hold_settlement(self, tag: int, multiple: bool, requeue: bool | None) -> None:
        """``basic.ack`` (``requeue`` None), ``basic.nack`` / ``basic.reject``: the tags
        are checked now (406 for an unknown one, as without a transaction), settled at
        the commit."""
        tags = self._settlement.tags_of(tag, multiple, self.held_tags)
        self._bounds.check_tx(self.held + len(tags), self.held_bytes)
        self.held_tags.update(tags)
        self.settlements.append((tags, requeue))

    def rollback(self) -> None:
        """``tx.rollback`` (or the channel closing): everything held is dropped."""
        self.publishes.clear()
        self.settlements.clear()
        self.held_tags.clear()
        self.held_bytes = 0

    def commit(self, conn: ChannelOwner, channel: int) -> bool:
        """``tx.commit``: route the held publishes, apply the held settlements (one
        synchronous step: one commit round); returns whether durable writes were staged
        (``commit-ok`` then waits for their sync).  The held state is empty afterwards:
        a new transaction starts at once (spec tx.commit)."""
        publishes, settlements = self.publishes, self.settlements
        self.publishes, self.settlements = [], []
        self.held_tags.clear()
        self.held_bytes = 0
        broker = conn.broker
        staged = False
        for p in publishes:
            flags, _routed = broker.publish(p.exchange, p.routing_key, p.properties, p.body,
                                            p.persistent, p.expiration, p.mandatory)
            if flags & STAGED:
                staged = True
            if flags & RETURNED:
                conn.send(encode_content(channel, spec.BasicReturn(
                    NO_ROUTE, "NO_ROUTE", p.exchange.name, p.routing_key), p.properties,
                    p.body, conn.frame_max))
        settlement = self._settlement
        for tags, requeue in settlements:
            if settlement.settle(tags, requeue):
                staged = True
        broker.counters["tx_commits"] += 1
        return staged

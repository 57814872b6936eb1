"""The publishing burst: ``basic.publish`` frames routed as they arrive, ONE commit at the
end of the burst for every durable record they staged, then the publisher confirms in
publish order, coalesced to one ``basic.ack multiple=true`` per channel (a publish a queue
refused, or a failed commit, is nacked).  A burst nobody waits a confirm for is not
awaited at all: its records are committed soon (and before any close-ok).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from oxiedge.amqp import authz, spec
from oxiedge.amqp.actions import COMMIT, Steps
from oxiedge.amqp.codec import Command, encode_basic_ack, encode_content
from oxiedge.amqp.constants import ACCESS_REFUSED, NO_ROUTE, NOT_FOUND, NOT_IMPLEMENTED
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.transaction import HeldPublish
from oxiedge.staged import COMMIT as STAGED  # the bus result bit (not the COMMIT action)
from oxiedge.staged import REFUSED, RETURNED

if TYPE_CHECKING:
    from oxiedge.access.grants import Grants
    from oxiedge.access.rules import PermissionStore
    from oxiedge.amqp.broker import Broker
    from oxiedge.amqp.channel import Channel


class BurstHost(Protocol):
    """What a burst needs of its connection (``AmqpProtocol`` is the one there is): the
    principal the publish permissions are checked for, its output, and the transport
    loop's answer to the last ``COMMIT``."""

    grants: Grants | None
    perms: PermissionStore
    broker: Broker
    frame_max: int

    @property
    def user(self) -> str:
        """The connection's user name."""

    @property
    def commit_error(self) -> BaseException | None:
        """The transport loop's answer to the last ``COMMIT`` (``commit_done``)."""

    def send(self, data: bytes) -> None:
        """Output a frame."""


class PublishBurst:
    """One connection's publishing: the publishes of the current burst, the confirms they
    owe and whether their durable records were committed (see the module docstring)."""

    def __init__(self, conn: BurstHost, broker: Broker, store: Any, log: logging.Logger,
                 peer: str) -> None:
        self._conn = conn
        self._broker = broker
        self._store = store
        self._log = log
        self._peer = peer
        self.publisher = False  # has published: throttled while a resource alarm is on
        self.published = 0
        self.needs_commit = False  # durable publish records of this burst
        self.confirms: list[tuple[Channel, int, bool]] = []  # (channel, seq, accepted)
        # Publishes staged but not awaited (no confirms): synced before any close-ok.
        self.unsynced = False

    def publish(self, ch: Channel, cmd: Command) -> None:
        """Route one ``basic.publish`` (its confirm waits for :meth:`flush`)."""
        m: spec.BasicPublish = cmd.method  # type: ignore[assignment]
        self.publisher = True
        broker = self._broker
        x = broker.exchanges.get(m.exchange)
        if x is None:
            raise AmqpError(NOT_FOUND, f"no exchange '{m.exchange}' in vhost '/'", 60, 40)
        if m.immediate:
            # RabbitMQ's exact words, which client test suites compare.
            raise AmqpError(NOT_IMPLEMENTED, "immediate=true", 60, 40, hard=True)
        if x.internal:
            raise AmqpError(ACCESS_REFUSED, f"cannot publish to internal exchange '{x.name}'",
                            60, 40)
        conn = self._conn
        if conn.perms.active:
            authz.check_publish(conn, x, m.routing_key)
        self.published += 1
        if ch.tx is not None:  # a transactional channel: held until tx.commit
            ch.tx.hold_publish(HeldPublish(x, m.routing_key, cmd.properties or b"\x00\x00",
                                           cmd.body or b"", cmd.delivery_mode == 2,
                                           cmd.expiration, m.mandatory))
            return
        confirm = ch.confirm
        if confirm:
            ch.publish_seq += 1
            self.confirms.append((ch, ch.publish_seq, True))
        props = cmd.properties or b"\x00\x00"
        body = cmd.body or b""
        flags, _routed = broker.publish(x, m.routing_key, props, body,
                                        cmd.delivery_mode == 2, cmd.expiration, m.mandatory)
        if flags & STAGED:
            self.needs_commit = True
        if flags & REFUSED and confirm:
            # Refused by x-overflow=reject-publish: a confirming publisher gets basic.nack
            # for it (RabbitMQ).
            self.confirms[-1] = (ch, ch.publish_seq, False)
        if flags & RETURNED:
            # Sent now, so it always precedes the confirm (sent at the flush).
            conn.send(encode_content(ch.number, spec.BasicReturn(
                NO_ROUTE, "NO_ROUTE", m.exchange, m.routing_key), props, body,
                conn.frame_max))

    @property
    def flush_due(self) -> bool:
        """The burst staged records, or owes confirms (:meth:`flush` has work; a quiet
        burst skips the generator)."""
        return self.needs_commit or bool(self.confirms)

    def flush(self) -> Steps:
        """End of a burst: one commit for all its durable records, then the confirms in
        publish order (coalesced per channel)."""
        ok = True
        if self.needs_commit and not self.confirms:
            # Nobody waits for a confirm: get the records written soon, but do not hold
            # this connection for the sync (a close waits for it, though).
            self.needs_commit = False
            self.unsynced = True
            self._store.kick()
        elif self.needs_commit:
            self.needs_commit = False
            yield COMMIT
            error = self._conn.commit_error  # (always answered before the step resumes)
            if error is not None:  # CommitError: nothing of the round may be confirmed
                ok = False
                self._log.error("AMQP %s: commit failed, publishes nacked: %s", self._peer,
                                error)
        if self.confirms:
            confirms, self.confirms = self.confirms, []
            self._send_confirms(confirms, ok)

    def take_unsynced(self) -> bool:
        """Were publishes staged without being awaited (no confirms)?  The caller makes
        them durable (before a close-ok)."""
        unsynced, self.unsynced = self.unsynced, False
        return unsynced

    def _send_confirms(self, confirms: list[tuple[Channel, int, bool]], ok: bool) -> None:
        """Confirms in publish order, per channel: runs of acks coalesced into one
        ``basic.ack multiple=true``; a rejected publish (or a failed commit) is nacked."""
        counters = self._broker.counters
        send = self._conn.send
        if len(confirms) == 1:  # one publish per burst (a publisher that waits for each)
            ch, seq, accepted = confirms[0]
            if accepted and ok:
                if not ch.closing:
                    send(encode_basic_ack(ch.number, seq, False))
                    counters["confirmed"] += 1
                return
        runs: dict[Channel, list[tuple[int, bool]]] = {}
        for ch, seq, accepted in confirms:
            runs.setdefault(ch, []).append((seq, accepted and ok))
        for ch, items in runs.items():
            if ch.closing:
                continue
            first = last = 0
            for seq, accepted in items:
                if accepted:
                    first = first or seq
                    last = seq
                    continue
                if last:
                    send(encode_basic_ack(ch.number, last, last != first))
                    first = last = 0
                ch.reply(spec.BasicNack(seq, False, False))
                counters["nacked_confirms"] += 1
            if last:
                send(encode_basic_ack(ch.number, last, last != first))
            counters["confirmed"] += sum(1 for _s, accepted in items if accepted)

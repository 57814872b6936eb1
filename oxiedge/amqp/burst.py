"""The publishing burst: ``basic.publish`` frames routed as they arrive, ONE commit at the
end of the burst for every durable record they staged, then the publisher confirms in
publish order, coalesced to one ``basic.ack multiple=true`` per channel (a publish a queue
refused, or a failed commit, is nacked).  A burst nobody waits a confirm for is not
awaited at all: its records are committed soon (and before any close-ok).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from oxiedge.amqp import authz, spec
from oxiedge.amqp.actions import COMMIT, Steps
from oxiedge.amqp.codec import Command, encode_basic_ack, encode_content
from oxiedge.amqp.constants import ACCESS_REFUSED, NO_ROUTE, NOT_FOUND, NOT_IMPLEMENTED
from oxiedge.amqp.errors import AmqpError
from oxiedge.staged import COMMIT as STAGED  # the bus result bit (not the COMMIT action)
from oxiedge.staged import REFUSED, RETURNED

if TYPE_CHECKING:
    from collections.abc import Callable

    from oxiedge.access.grants import Grants
    from oxiedge.access.rules import PermissionStore
    from oxiedge.amqp.broker import Broker
    from oxiedge.amqp.channel import Channel


class PublishBurst:
    """The publishing half of :class:`~oxiedge.amqp.protocol.AmqpProtocol` (a mixin; the
    protocol owns the attributes declared here)."""

    broker: Broker
    store: Any
    user: str
    grants: Grants | None
    perms: PermissionStore
    log: logging.Logger
    peer: str
    frame_max: int
    publisher: bool
    published: int
    send: Callable[[bytes], None]
    _needs_commit: bool
    _confirms: list[tuple[Channel, int, bool]]
    _publishes_unsynced: bool
    _staged: bool
    _commit_error: BaseException | None

    def _publish(self, ch: Channel, cmd: Command) -> None:
        m: spec.BasicPublish = cmd.method  # type: ignore[assignment]
        self.publisher = True
        x = self.broker.exchanges.get(m.exchange)
        if x is None:
            raise AmqpError(NOT_FOUND, f"no exchange '{m.exchange}' in vhost '/'", 60, 40)
        if m.immediate:
            # RabbitMQ's exact words, which client test suites compare.
            raise AmqpError(NOT_IMPLEMENTED, "immediate=true", 60, 40, hard=True)
        if x.internal:
            raise AmqpError(ACCESS_REFUSED, f"cannot publish to internal exchange '{x.name}'",
                            60, 40)
        if self.perms.active:
            authz.check_publish(self, x, m.routing_key)
        self.published += 1
        confirm = ch.confirm
        if confirm:
            ch.publish_seq += 1
            self._confirms.append((ch, ch.publish_seq, True))
        props = cmd.properties or b"\x00\x00"
        body = cmd.body or b""
        flags, _routed = self.broker.publish(x, m.routing_key, props, body,
                                             cmd.delivery_mode == 2, cmd.expiration,
                                             m.mandatory)
        if flags & STAGED:
            self._needs_commit = True
        if flags & REFUSED and confirm:
            # Refused by x-overflow=reject-publish: a confirming publisher gets basic.nack
            # for it (RabbitMQ).
            self._confirms[-1] = (ch, ch.publish_seq, False)
        if flags & RETURNED:
            # Sent now, so it always precedes the confirm (sent at the flush).
            self.send(encode_content(ch.number, spec.BasicReturn(
                NO_ROUTE, "NO_ROUTE", m.exchange, m.routing_key), props, body,
                self.frame_max))

    @property
    def _flush_due(self) -> bool:
        """The burst staged, or owes confirms (``_flush`` has work; a quiet burst skips
        the generator)."""
        return self._needs_commit or bool(self._confirms) or self._staged

    def _flush(self) -> Steps:
        """End of a burst: one commit for all its durable records, then the confirms in
        publish order (coalesced per channel)."""
        ok = True
        if self._needs_commit and not self._confirms:
            # Nobody waits for a confirm: get the records written soon, but do not hold
            # this connection for the sync (a close waits for it, though).
            self._needs_commit = False
            self._publishes_unsynced = True
            self.store.kick()
        elif self._needs_commit:
            self._needs_commit = False
            self._commit_error = None
            yield COMMIT
            error = self._commit_error
            if error is not None:  # CommitError: nothing of the round may be confirmed
                ok = False
                self.log.error("AMQP %s: commit failed, publishes nacked: %s", self.peer,
                               error)
        if self._confirms:
            confirms, self._confirms = self._confirms, []
            self._send_confirms(confirms, ok)
        if self._staged:
            self._staged = False
            self.store.kick()

    def _send_confirms(self, confirms: list[tuple[Channel, int, bool]], ok: bool) -> None:
        """Confirms in publish order, per channel: runs of acks coalesced into one
        ``basic.ack multiple=true``; a rejected publish (or a failed commit) is nacked."""
        counters = self.broker.counters
        if len(confirms) == 1:  # one publish per burst (a publisher that waits for each)
            ch, seq, accepted = confirms[0]
            if accepted and ok:
                if not ch.closing:
                    self.send(encode_basic_ack(ch.number, seq, False))
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
                    self.send(encode_basic_ack(ch.number, last, last != first))
                    first = last = 0
                ch.reply(spec.BasicNack(seq, False, False))
                counters["nacked_confirms"] += 1
            if last:
                self.send(encode_basic_ack(ch.number, last, last != first))
            counters["confirmed"] += sum(1 for _s, accepted in items if accepted)

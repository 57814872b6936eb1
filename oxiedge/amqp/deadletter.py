"""Dead-letter headers, as RabbitMQ writes them (https://www.rabbitmq.com/docs/dlx).

A dead-lettered message is republished to its queue's dead-letter exchange with its
properties rewritten here (pure functions, no I/O):

* ``x-death``: an array of tables, one per ``(queue, reason)``, most recent first.  A new
  pair is prepended; a pair seen before has its ``count`` incremented and moves to the
  front (its ``time``, ``exchange`` and ``routing-keys`` stay those of the first time, as
  RabbitMQ keeps them).  Fields: ``queue``, ``reason`` (``rejected``, ``expired``,
  ``maxlen``, ``delivery_limit``), ``count``, ``exchange`` (the exchange the message was
  last published to), ``routing-keys``, ``time`` (timestamp) and, when the message had a
  per-message TTL, ``original-expiration``.
* ``x-first-death-queue/-reason/-exchange``: written once, never changed.
* ``x-last-death-queue/-reason/-exchange`` (RabbitMQ 3.13+): the latest event.
* The ``expiration`` property is removed, so the message does not expire again in the
  queues it reaches; ``x-delivery-count`` (quorum-queue redelivery counter) is removed, so
  a target queue counts its own deliveries.

Cycle rule (RabbitMQ): a message that would reach a queue it was already dead-lettered
from is dropped for that queue unless a client rejected it somewhere on the way (a
``rejected`` event more recent than that queue's entry): automatic cycles (expiry,
overflow, delivery limit) would otherwise loop for ever.
"""

from __future__ import annotations

import struct
from typing import Any, cast

from oxiedge.amqp import properties
from oxiedge.amqp.arguments import text
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.fields import (
    Long,
    Raw,
    Timestamp,
    decode_value,
    encode_table,
    encode_value,
    split_array,
    split_table,
)

REJECTED = "rejected"
EXPIRED = "expired"
MAXLEN = "maxlen"
DELIVERY_LIMIT = "delivery_limit"

#: One ``x-death`` entry as the cycle rule reads it: ``(queue, reason)``.
Death = tuple[str, str]

_Q = struct.Struct(">q")


def _long(n: int) -> Raw:
    return Raw(b"l" + _Q.pack(n))


def _text_of(value: Raw | None) -> str | None:
    if value is None:
        return None
    try:
        return text(decode_value(value)[0])
    except AmqpError:
        return None


def mark_dead(raw: bytes, queue: str, reason: str, exchange: str,
              routing_keys: list[str], now: float) -> tuple[bytes, list[Death]]:
    """Rewrite raw content properties for dead-lettering; returns ``(raw, deaths)``, the
    deaths most recent first. Only the ``x-death``/``x-*-death-*`` headers and
    ``expiration`` change; every other header keeps its bytes (and so its type)."""
    # Records stored before the headers were checked at arrival may not read: an
    # unreadable table is dropped, unreadable properties are started over.
    try:  # Raw values as read; the ones set below are plain (rewrite encodes both)
        headers = cast(dict[str, Any], properties.headers_of(raw))
    except AmqpError:
        headers = {}
    try:
        expiration = properties.expiration_of(raw)
    except (IndexError, struct.error):
        expiration = None
    entries: list[tuple[Death, Raw]] = []
    new: Raw | None = None  # this (queue, reason)'s entry, its count incremented
    old = headers.get("x-death")
    for item in split_array(old) if old is not None and old[:1] == b"A" else ():
        if item[:1] != b"F":  # anything else in x-death is not RabbitMQ's: dropped
            continue
        fields = split_table(item, 1)[0]
        death = (_text_of(fields.get("queue")) or "", _text_of(fields.get("reason")) or "")
        if death == (queue, reason) and new is None:
            count = decode_value(fields["count"])[0] if "count" in fields else 0
            fields["count"] = _long((count if isinstance(count, int) else 0) + 1)
            new = Raw(b"F" + encode_table(fields))
        else:
            entries.append((death, item))
    if new is None:
        entry = {"count": Long(1), "reason": reason, "queue": queue, "time": Timestamp(int(now)),
                 "exchange": exchange, "routing-keys": list(routing_keys)}
        if expiration is not None:
            entry["original-expiration"] = expiration
        new = Raw(encode_value(entry))
    entries.insert(0, ((queue, reason), new))
    headers["x-death"] = [item for _, item in entries]
    if "x-first-death-reason" not in headers:
        headers["x-first-death-reason"] = reason
        headers["x-first-death-queue"] = queue
        headers["x-first-death-exchange"] = exchange
    headers["x-last-death-reason"] = reason
    headers["x-last-death-queue"] = queue
    headers["x-last-death-exchange"] = exchange
    headers.pop("x-delivery-count", None)
    deaths = [d for d, _ in entries]
    try:
        return properties.rewrite(raw, headers, drop_expiration=True), deaths
    except AmqpError:
        return properties.rewrite(b"\x00\x00", headers), deaths


def is_cycle(target: str, deaths: list[Death]) -> bool:
    """Would reaching queue ``target`` close an automatic dead-letter cycle?"""
    for queue, reason in deaths:  # most recent first
        if reason == REJECTED:
            return False
        if queue == target:
            return True
    return False


def with_delivery_count(raw: bytes, count: int) -> bytes:
    """The properties with ``x-delivery-count`` set (quorum-queue redelivery header); the
    other headers keep their bytes."""
    try:
        headers = properties.headers_of(raw)
    except AmqpError:
        return raw
    headers["x-delivery-count"] = _long(count)
    return properties.rewrite(raw, headers)


def delivery_count_of(raw: bytes) -> int:
    """``x-delivery-count`` of raw properties (0 when absent)."""
    try:
        value = properties.headers_of(raw).get("x-delivery-count")
        n = decode_value(value)[0] if value is not None else 0
    except AmqpError:
        return 0
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0

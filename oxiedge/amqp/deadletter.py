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

import dataclasses
from typing import Any

from oxiedge.amqp import spec
from oxiedge.amqp.arguments import text
from oxiedge.amqp.fields import Long, Timestamp

REJECTED = "rejected"
EXPIRED = "expired"
MAXLEN = "maxlen"
DELIVERY_LIMIT = "delivery_limit"


def mark_dead(properties: bytes, queue: str, reason: str, exchange: str,
              routing_keys: list[str], now: float) -> tuple[bytes, list[dict[str, Any]]]:
    """Rewrite raw content properties for dead-lettering; returns ``(raw, x-death)``."""
    try:
        props, _ = spec.BasicProperties.decode(properties)
    except Exception:  # unreadable properties (scan_properties let them through): start over
        props = spec.BasicProperties()
    headers: dict[str, Any] = dict(props.headers or {})
    raw_deaths = headers.get("x-death")
    deaths: list[dict[str, Any]] = [d for d in raw_deaths if isinstance(d, dict)] \
        if isinstance(raw_deaths, list) else []
    entry: dict[str, Any] | None = None
    for i, d in enumerate(deaths):
        if text(d.get("queue")) == queue and text(d.get("reason")) == reason:
            entry = dict(deaths.pop(i))
            count = entry.get("count")
            entry["count"] = Long((count if isinstance(count, int) else 0) + 1)
            break
    if entry is None:
        entry = {"count": Long(1), "reason": reason, "queue": queue, "time": Timestamp(int(now)),
                 "exchange": exchange, "routing-keys": list(routing_keys)}
        if props.expiration is not None:
            entry["original-expiration"] = props.expiration
    deaths.insert(0, entry)
    headers["x-death"] = deaths
    if "x-first-death-reason" not in headers:
        headers["x-first-death-reason"] = reason
        headers["x-first-death-queue"] = queue
        headers["x-first-death-exchange"] = exchange
    headers["x-last-death-reason"] = reason
    headers["x-last-death-queue"] = queue
    headers["x-last-death-exchange"] = exchange
    headers.pop("x-delivery-count", None)
    props = dataclasses.replace(props, headers=headers, expiration=None)
    return props.encode(), deaths


def is_cycle(target: str, deaths: list[dict[str, Any]]) -> bool:
    """Would reaching queue ``target`` close an automatic dead-letter cycle?"""
    for d in deaths:  # most recent first
        if text(d.get("reason")) == REJECTED:
            return False
        if text(d.get("queue")) == target:
            return True
    return False


def with_delivery_count(properties: bytes, count: int) -> bytes:
    """The properties with ``x-delivery-count`` set (quorum-queue redelivery header)."""
    try:
        props, _ = spec.BasicProperties.decode(properties)
    except Exception:
        return properties
    headers = dict(props.headers or {})
    headers["x-delivery-count"] = Long(count)
    return dataclasses.replace(props, headers=headers).encode()


def delivery_count_of(properties: bytes) -> int:
    """``x-delivery-count`` of raw properties (0 when absent)."""
    try:
        props, _ = spec.BasicProperties.decode(properties)
    except Exception:
        return 0
    value = (props.headers or {}).get("x-delivery-count")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

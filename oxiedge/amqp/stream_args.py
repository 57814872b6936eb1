"""The arguments of stream queues: ``queue.declare``'s and ``basic.consume``'s.

RabbitMQ's rules (checked against RabbitMQ 3.10 with pika): a stream is durable, never
exclusive or auto-delete (406 naming the property); the classic/quorum arguments that mean
nothing for a log (``x-max-length``, ``x-message-ttl``, dead-lettering, ``x-overflow``,
priorities, ``x-expires``, single active consumer, delivery limits) are refused with 406;
retention is ``x-max-age`` (an interval such as ``7D`` or ``6h``) and ``x-max-length-bytes``,
in whole segments of ``x-stream-max-segment-size-bytes``. A consumer needs a prefetch
(``basic.qos`` global=false, 406 otherwise) and manual acks (540 otherwise, a connection
error as in RabbitMQ), and picks where it starts with ``x-stream-offset``: ``first``,
``last``, ``next`` (the default), an offset, a timestamp, or an interval back from now.
Where RabbitMQ answers a malformed value with 541 INTERNAL_ERROR (``x-max-age: bogus``,
``x-stream-offset: bogus``), oxiedge answers 406 naming the argument.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from oxiedge.amqp.constants import NOT_IMPLEMENTED, PRECONDITION_FAILED
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.fields import Timestamp

#: Queue arguments a stream refuses (RabbitMQ: "invalid arg ... of queue type
#: rabbit_stream_queue").
REFUSED_QUEUE_ARGS = frozenset({
    "x-max-length", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
    "x-overflow", "x-max-priority", "x-expires", "x-single-active-consumer",
    "x-delivery-limit", "x-consumer-timeout", "x-queue-mode", "x-queue-version",
    "x-max-in-memory-length", "x-max-in-memory-bytes", "x-quorum-initial-group-size",
    "x-quorum-target-group-size"})
#: Stream-only arguments (the checks of the others are ``arguments.py``'s).
STREAM_QUEUE_ARGS = ("x-max-age", "x-stream-max-segment-size-bytes", "x-initial-cluster-size")

#: ``x-max-age`` / interval units, as RabbitMQ spells them (M is a month, m a minute).
_UNITS = {"Y": 365 * 86400, "M": 30 * 86400, "D": 86400, "h": 3600, "m": 60, "s": 1}
#: (At most 18 digits: a long string of them, which a long-string argument can carry, is
#: no interval rather than a ValueError from ``int``, whose limit is 4,300 digits.)
_INTERVAL = re.compile(r"^([0-9]{1,18})([YMDhms])$")


def _text(v: Any) -> str | None:
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8", "replace")
    return v if isinstance(v, str) else None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def interval_seconds(value: Any) -> int | None:
    """Seconds of an interval string (``30m``, ``6h``, ``7D``, ``1Y``) greater than 0;
    None for anything else."""
    text = _text(value)
    m = _INTERVAL.match(text) if text is not None else None
    if m is None:
        return None
    seconds = int(m.group(1)) * _UNITS[m.group(2)]
    return seconds or None


def is_stream(arguments: dict[str, Any] | None) -> bool:
    return bool(arguments) and _text(arguments.get("x-queue-type")) == "stream"  # type: ignore[union-attr]


def check_stream_declare(where: str, arguments: dict[str, Any], *, durable: bool,
                         exclusive: bool, auto_delete: bool) -> None:
    """406 for what a stream ``queue.declare`` may not carry (see the module docstring)."""
    for bad, prop in ((not durable, "non-durable"), (exclusive, "exclusive-owner"),
                      (auto_delete, "auto-delete")):
        if bad:
            raise AmqpError(PRECONDITION_FAILED, f"invalid property '{prop}' for {where}")
    for key, value in arguments.items():
        if key in REFUSED_QUEUE_ARGS:
            raise AmqpError(PRECONDITION_FAILED,
                            f"invalid arg '{key}' for {where} of queue type stream")
        if key == "x-max-age" and interval_seconds(value) is None:
            raise AmqpError(PRECONDITION_FAILED, f"invalid arg 'x-max-age' for {where}: "
                            f"{value!r} (an interval such as 7D, 12h, 30m; units Y M D h m s)")
        if key in ("x-stream-max-segment-size-bytes", "x-initial-cluster-size") and \
                not (_is_int(value) and value > 0):
            raise AmqpError(PRECONDITION_FAILED, f"invalid arg '{key}' for {where}: "
                            f"{value!r} (a positive integer)")


@dataclass(frozen=True, slots=True)
class StartAt:
    """Where a stream consumer starts: ``kind`` is ``first``, ``last``, ``next``,
    ``offset`` (``value`` the offset) or ``time`` (``value`` ms since the epoch)."""

    kind: str
    value: int = 0


#: Consumer arguments a stream consumer refuses (RabbitMQ 406).
_REFUSED_CONSUMER_ARGS = ("x-priority",)
_CONSUMER_ARGS = ("x-stream-offset", "x-cancel-on-ha-failover", "x-consumer-timeout")


def stream_consume(where: str, arguments: dict[str, Any], no_ack: bool, prefetch: int,
                   now_ms: int) -> StartAt:
    """Check a ``basic.consume`` on a stream; returns where it starts."""
    if no_ack:
        raise AmqpError(NOT_IMPLEMENTED, "automatic acknowledgement not supported by stream "
                        f"queues {where}", hard=True)
    if prefetch <= 0:
        raise AmqpError(PRECONDITION_FAILED, f"consumer prefetch count is not set for '{where}'"
                        " (basic.qos with a prefetch count, global=false, before basic.consume)",
                        60, 20)
    for key in arguments:
        if key in _REFUSED_CONSUMER_ARGS:
            raise AmqpError(PRECONDITION_FAILED,
                            f"invalid arg '{key}' for {where} of queue type stream", 60, 20)
        if key not in _CONSUMER_ARGS:
            raise AmqpError(NOT_IMPLEMENTED, f"consumer argument '{key}' is not implemented",
                            hard=True)
    if "x-stream-offset" not in arguments:
        return StartAt("next")
    return start_at(where, arguments["x-stream-offset"], now_ms)


def start_at(where: str, value: Any, now_ms: int) -> StartAt:
    """An ``x-stream-offset`` value as a :class:`StartAt` (406 naming it when invalid)."""
    if isinstance(value, Timestamp):  # (before int: a Timestamp is an int)
        return StartAt("time", int(value) * 1000)
    if _is_int(value):
        return StartAt("offset", max(int(value), 0))  # a negative offset is the first
    text = _text(value)
    if text in ("first", "last", "next"):
        return StartAt(text)
    seconds = interval_seconds(value)
    if seconds is not None:
        return StartAt("time", now_ms - seconds * 1000)
    raise AmqpError(PRECONDITION_FAILED,
                    f"invalid arg 'x-stream-offset' for {where}: {value!r} (first, last, next,"
                    " an offset, a timestamp or an interval such as 30m, 6h, 7D)", 60, 20)

"""Queue and exchange arguments: which exist, their checks, and what they set on a queue.

RabbitMQ's reply codes: an invalid value is 406 PRECONDITION_FAILED (the channel closes);
an argument oxiedge does not implement is 540 NOT_IMPLEMENTED naming it, never a silent
accept.  The few RabbitMQ itself accepts and ignores on one node (:data:`IGNORED_QUEUE_ARGS`:
``x-queue-mode: lazy``…) are accepted the same way; stream queues have their own rules
(``stream_args.py``).  The semantics are described in ``docs/rabbitmq-semantics.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from oxiedge.amqp.constants import NOT_IMPLEMENTED, PRECONDITION_FAILED
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.selection import SingleActive
from oxiedge.amqp.stream_args import STREAM_QUEUE_ARGS, check_stream_declare, is_stream

if TYPE_CHECKING:
    from oxiedge.amqp.queues import Queue


def _int_at_least(low: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low


def _is_str(v: Any) -> bool:
    return isinstance(v, (str, bytes))


def text(v: Any) -> str:
    """A field-table string value (longstr may arrive as bytes) as ``str``."""
    return bytes(v).decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v)


OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")
QUEUE_TYPES = ("classic", "quorum", "stream")
#: Queue leader placement strategies (RabbitMQ 3.x names and 4.x's ``balanced``).
LOCATORS = ("client-local", "balanced", "min-masters", "random", "least-leaders")
#: RabbitMQ 4.0+ gives every quorum queue a delivery limit of 20 unless one is set.
QUORUM_DEFAULT_DELIVERY_LIMIT = 20

#: The queue arguments oxiedge implements, with their validity check.
SUPPORTED_QUEUE_ARGS: dict[str, Callable[[Any], bool]] = {
    "x-queue-type": lambda v: _is_str(v) and text(v) in QUEUE_TYPES,
    "x-max-length": _int_at_least(0),
    "x-max-length-bytes": _int_at_least(0),
    "x-message-ttl": _int_at_least(0),
    "x-expires": _int_at_least(1),
    "x-overflow": lambda v: _is_str(v) and text(v) in OVERFLOW_MODES,
    "x-dead-letter-exchange": _is_str,
    "x-dead-letter-routing-key": _is_str,
    "x-delivery-limit": _int_at_least(-1),  # -1 = unlimited (RabbitMQ 4.0)
    # 0 is accepted (a plain queue), as RabbitMQ's check does; priority.py
    "x-max-priority": lambda v: _int_at_least(0)(v) and v <= 255,
    "x-single-active-consumer": lambda v: isinstance(v, bool),  # selection.py
    "x-consumer-timeout": _int_at_least(1),  # ms, acktimeout.py
}

#: Arguments RabbitMQ accepts that change nothing on one node (lazy mode is ignored since
#: 3.12; leader placement and replication only matter in a cluster): accepted with
#: RabbitMQ's value check, kept (and shown) with the queue, and otherwise ignored.
IGNORED_QUEUE_ARGS: dict[str, Callable[[Any], bool]] = {
    "x-queue-mode": lambda v: _is_str(v) and text(v) in ("default", "lazy"),
    "x-queue-version": lambda v: v in (1, 2) and not isinstance(v, bool),
    "x-queue-master-locator": lambda v: _is_str(v) and text(v) in LOCATORS,
    "x-queue-leader-locator": lambda v: _is_str(v) and text(v) in LOCATORS,
    "x-quorum-initial-group-size": _int_at_least(1),
    "x-quorum-target-group-size": _int_at_least(1),
    "x-max-in-memory-length": _int_at_least(0),
    "x-max-in-memory-bytes": _int_at_least(0),
}
SUPPORTED_QUEUE_ARGS.update(IGNORED_QUEUE_ARGS)


def check_queue_args(where: str, arguments: dict[str, Any], *, durable: bool,
                     exclusive: bool, auto_delete: bool) -> None:
    """Raise 406/540 for arguments a ``queue.declare`` may not carry."""
    stream = is_stream(arguments)
    if stream:  # (stream_args.py: what a stream refuses, its own arguments)
        check_stream_declare(where, arguments, durable=durable, exclusive=exclusive,
                             auto_delete=auto_delete)
    for key, value in arguments.items():
        check = SUPPORTED_QUEUE_ARGS.get(key)
        if check is None:
            if stream and key in STREAM_QUEUE_ARGS:
                continue
            raise AmqpError(NOT_IMPLEMENTED, f"queue argument '{key}' is not implemented")
        if not check(value):
            raise AmqpError(PRECONDITION_FAILED, f"invalid arg '{key}' for {where}: {value!r}")
    if "x-dead-letter-routing-key" in arguments and "x-dead-letter-exchange" not in arguments:
        raise AmqpError(PRECONDITION_FAILED,
                        f"invalid arg 'x-dead-letter-routing-key' for {where}: "
                        "Key x-dead-letter-exchange must be set")
    if text(arguments.get("x-queue-type", "classic")) == "quorum":
        # A quorum queue is durable and outlives its connection and consumers, as in
        # RabbitMQ (which names the offending property).
        for bad, prop in ((not durable, "non-durable"), (exclusive, "exclusive-owner"),
                          (auto_delete, "auto-delete")):
            if bad:
                raise AmqpError(PRECONDITION_FAILED, f"invalid property '{prop}' for {where}")


def configure_queue(q: Queue, queue_limit: int, queue_bytes: int | None = None) -> None:
    """Set a new queue's behaviour from its (already checked) arguments.

    ``queue_bytes`` is the broker's default byte cap (``--amqp-queue-bytes``) for a queue
    declared without ``x-max-length-bytes``; it drops from the head like the count bound.
    """
    a = q.arguments
    if "x-max-length" in a:  # never above the broker-wide bound
        q.limit = min(queue_limit, int(a["x-max-length"]))
    if "x-max-length-bytes" in a:
        q.max_bytes = int(a["x-max-length-bytes"])
    elif queue_bytes is not None:
        q.max_bytes = queue_bytes
    q.overflow = text(a.get("x-overflow", "drop-head"))
    q.reject_publish = q.overflow != "drop-head"
    if "x-message-ttl" in a:
        q.message_ttl = int(a["x-message-ttl"])
        q.ttl_seen = True
    if "x-dead-letter-exchange" in a:
        q.dlx = text(a["x-dead-letter-exchange"])
        if "x-dead-letter-routing-key" in a:
            q.dlrk = text(a["x-dead-letter-routing-key"])
    q.queue_type = text(a.get("x-queue-type", "classic"))
    limit = a.get("x-delivery-limit")
    if limit is None and q.queue_type == "quorum":
        limit = QUORUM_DEFAULT_DELIVERY_LIMIT
    q.delivery_limit = None if limit is None or limit < 0 else int(limit)
    if "x-expires" in a:
        q.expires_ms = int(a["x-expires"])
    # Plain queues keep the lean publish path (connection._publish); a byte cap with
    # drop-head needs nothing there (ByteLimitedQueue.enqueue drops the head itself).
    q.plain = q.message_ttl is None and not q.reject_publish
    if "x-consumer-timeout" in a:
        q.consumer_timeout_ms = int(a["x-consumer-timeout"])
    if a.get("x-single-active-consumer") is True:
        q.selector = SingleActive()


def check_exchange_args(where: str, arguments: dict[str, Any]) -> str | None:
    """Only ``alternate-exchange`` is implemented; returns it (or ``None``)."""
    for key, value in arguments.items():
        if key != "alternate-exchange":
            raise AmqpError(NOT_IMPLEMENTED, f"exchange argument '{key}' is not implemented")
        if not _is_str(value):
            raise AmqpError(PRECONDITION_FAILED, f"invalid arg '{key}' for {where}: {value!r}")
    return alternate_of(arguments)


def alternate_of(arguments: dict[str, Any]) -> str | None:
    """The ``alternate-exchange`` of stored or declared exchange arguments."""
    alt = arguments.get("alternate-exchange")
    return text(alt) if alt is not None else None

"""The operator's changes on a stopped server's data dir (``oxiedge queue purge|delete``,
``session delete``, ``retained clear`` with no server running; the CLI opens the store).

Each answers with the same result row as the running server's operation
(``amqp/operations.py``, ``mqtt/operations.py``) and refuses with the same kinds, and
changes the records exactly as the broker would: through the brokers' own record layouts
(``amqp/persist.py``, ``mqtt/persist.py``), in one committed write batch. With no server,
nothing is connected, consumed or unacknowledged: every stored message is ready, so
``--if-unused`` always holds and a purge drops every stored message of the queue. A server
holding the data dir is never written behind its back: the store's lock refuses the open
(the CLI says so) - these run only when no server answers on the admin socket.
"""

from __future__ import annotations

from typing import Any

from ..amqp import persist as amqp_records
from ..amqp.operations import QueueCount
from ..mqtt import persist as mqtt_records
from ..mqtt.operations import RetainedCleared, SessionDeleted
from ..mqtt.topics import valid_topic_name
from ..operations import BAD_REQUEST, NOT_FOUND, REFUSED, OperationError


def _queue_doc(store: Any, name: str) -> dict[str, Any]:
    queues, _exchanges, _binds = amqp_records.load_docs(store)
    for doc in queues:
        if doc.get("name") == name:
            return doc
    # RabbitMQ's words, as the running server answers (docs/operations.md)
    raise OperationError(f"NOT_FOUND - no queue '{name}' in vhost '/'", NOT_FOUND)


def _count_until(store: Any, qid: int) -> int:
    start, end = amqp_records.queue_range(qid)
    n = 0
    for key, _value in store.iter_raw(amqp_records.CF, amqp_records.MSG_PREFIX, start=start):
        if key >= end:
            break
        n += 1
    return n


def purge_queue(store: Any, name: str) -> QueueCount:
    """Drop every stored message of the durable queue ``name``."""
    qid = int(_queue_doc(store, name)["qid"])
    count = _count_until(store, qid)
    store.stage_delete_range(amqp_records.CF, *amqp_records.queue_range(qid))
    store.commit_blocking()
    return QueueCount(name, count)


def delete_queue(store: Any, name: str, if_unused: bool = False,
                 if_empty: bool = False) -> QueueCount:
    """Delete the durable queue ``name`` with its bindings and stored messages."""
    del if_unused  # nothing consumes from a stopped server
    doc = _queue_doc(store, name)
    qid = int(doc["qid"])
    count = _count_until(store, qid)
    if if_empty and count:
        raise OperationError(f"PRECONDITION_FAILED - queue '{name}' in vhost '/' is not empty",
                             REFUSED)
    _queues, _exchanges, binds = amqp_records.load_docs(store)
    for bind in binds:
        if bind.get("queue") == name and "destination_exchange" not in bind:
            store.stage_delete(amqp_records.COLL, int(bind["_id"]))
    store.stage_delete(amqp_records.COLL, int(doc["_id"]))
    store.stage_delete_range(amqp_records.CF, *amqp_records.queue_range(qid))
    store.commit_blocking()
    return QueueCount(name, count)


def delete_session(store: Any, client: str) -> SessionDeleted:
    """Delete the persistent session of ``client`` with everything it owns."""
    key = mqtt_records.session_key(client)
    value = store.get_raw(mqtt_records.CF, key)
    if value is None:
        raise OperationError(f"no MQTT session of client {client!r}", NOT_FOUND)
    try:
        _client, owner, subs, _user = mqtt_records.check_session(key, value)
    except ValueError as exc:
        raise OperationError(f"the session record of {client!r} is unreadable: {exc}",
                             REFUSED) from None
    ob = mqtt_records.owner_bytes(owner)
    messages = sum(1 for _ in store.iter_raw(mqtt_records.CF, mqtt_records.MSG + ob))
    messages += sum(1 for _ in store.iter_raw(mqtt_records.CF, mqtt_records.REL + ob))
    mqtt_records.stage_delete_session(store, client, owner)
    store.commit_blocking()
    return SessionDeleted(client, messages, len(subs), False)


def clear_retained(store: Any, topic: str | None, everything: bool = False
                   ) -> RetainedCleared:
    """Clear one topic's retained message, or all of them."""
    if everything == (topic is not None):
        raise OperationError("give a topic or --all", BAD_REQUEST)
    if topic is not None and not valid_topic_name(topic):
        raise OperationError(f"{topic!r} is not a topic name (no wildcards)", BAD_REQUEST)
    stored = sorted(t for t, _qos, _payload in mqtt_records.load_retained(store))
    topics = stored if everything else [topic or ""]
    if not everything and topic not in stored:
        raise OperationError(f"no retained message on topic {topic!r}", NOT_FOUND)
    for t in topics:
        store.stage_delete_key(mqtt_records.CF, mqtt_records.retain_key(t))
    store.commit_blocking()
    return RetainedCleared(len(topics), topics)


def subscriptions(store: Any) -> list[dict[str, Any]]:
    """``oxiedge subscriptions`` of a stopped server: its persistent sessions' filters."""
    rows = [{"client": client, "filter": flt, "qos": qos, "connected": False}
            for client, subs, _queued, _rel in mqtt_records.session_summaries(store)
            for flt, qos in sorted(subs.items())]
    return sorted(rows, key=lambda r: (r["client"], r["filter"]))

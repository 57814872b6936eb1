"""Recovery of the durable AMQP state at start-up (before any listener opens).

Exchanges, queues and bindings come from their ``_amqp`` documents, messages from the
``amqp`` column family (key ``(queue id, seq)``).  A queue on queue logs (``paging.py``:
durable classic, quorum and priority queues) reads its counters, head and tail, no message;
a priority queue with records of the older layout reads them.  The key space is walked one
queue at a time (one seek each) to find the messages of queues that are gone.  A record
recovery cannot use is quarantined (``store.quarantine*``), never silently dropped; a
message whose queue is gone is deleted unless a queue record was quarantined in the same
start (then it may be that queue's, and is moved aside too).
"""

from __future__ import annotations

import struct
from typing import Any

from oxiedge.amqp import paging, persist
from oxiedge.amqp.broker import Broker
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.exchanges import SUPPORTED_TYPES, Binding, ExchangeBinding
from oxiedge.amqp.properties import scan_properties
from oxiedge.amqp.queued import QueuedMessage
from oxiedge.amqp.queues import Queue
from oxiedge.amqp.topology import exchange_of_doc


def recover(broker: Broker) -> tuple[int, int]:
    """Load durable exchanges, queues, bindings and messages into ``broker``; returns
    ``(durable queues, messages)``.  Recovered messages are marked redelivered."""
    store = broker.store
    queue_docs, exchange_docs, bind_docs = persist.load_docs(store)
    bad = (ValueError, KeyError, TypeError, AmqpError)  # a record recovery cannot use

    def quarantine(doc: dict[str, Any], what: str, exc: Exception) -> None:
        store.quarantine_doc(persist.COLL, doc["_id"], f"{what}: {exc}")

    for doc in exchange_docs:
        try:
            persist.check_exchange_doc(doc, SUPPORTED_TYPES)
            if doc["name"] not in broker.exchanges:
                broker.topology.add_exchange(exchange_of_doc(doc))
        except bad as exc:
            quarantine(doc, "exchange", exc)
    by_qid: dict[int, Queue] = {}
    queue_quarantined = False  # then messages without a queue are moved aside, not deleted
    for doc in queue_docs:
        try:
            persist.check_queue_doc(doc)
            if doc["name"] in broker.queues:  # a duplicate record: keep the first
                store.stage_delete(persist.COLL, doc["_id"])
                continue
            q = broker.new_queue(doc["name"], int(doc["qid"]), durable=True,
                                auto_delete=doc.get("auto_delete", False),
                                arguments=doc.get("arguments") or {})
        except bad as exc:
            quarantine(doc, "queue", exc)
            queue_quarantined = True
            continue
        q.doc_id = doc["_id"]
        by_qid[q.qid] = q
        broker.next_qid = max(broker.next_qid, q.qid + 1)
    for doc in bind_docs:
        try:
            persist.check_bind_doc(doc)
        except bad as exc:
            quarantine(doc, "binding", exc)
            continue
        bx = broker.exchanges.get(doc["exchange"])
        if "destination_exchange" in doc:
            dx = broker.exchanges.get(doc["destination_exchange"])
            if bx is None or dx is None:
                store.stage_delete(persist.COLL, doc["_id"])
                continue
            xb = ExchangeBinding(bx.name, dx.name, doc.get("routing_key", ""))
            xb.doc_id = doc["_id"]
            bx.add_exchange_binding(xb)
            dx.sources.add(bx.name)
            continue
        bq = broker.queues.get(doc["queue"])
        if bq is None or bx is None:
            store.stage_delete(persist.COLL, doc["_id"])
            continue
        b = Binding(bx.name, bq, doc.get("routing_key", ""), doc.get("arguments") or {})
        b.doc_id = doc["_id"]
        bx.add(b)
    messages = 0
    with_records = _qids_with_messages(store)
    legacy = set(with_records)  # (a priority queue with these keeps them in memory)
    for q in by_qid.values():
        if broker.paging.attach(q, q.qid in legacy):
            messages += paging.recover(q)
    orphans: set[int] = set()
    loaded: list[tuple[Queue, QueuedMessage]] = []
    for qid in with_records:
        mq = by_qid.get(qid)
        if mq is not None and mq.paged is not None:
            continue  # on its queue log: read back when delivered
        lost = mq is None and (queue_quarantined or store.quarantined_now)
        if mq is None and not lost:
            orphans.add(qid)
            continue
        for key, value in store.iter_range(persist.CF, *persist.queue_range(qid)):
            seq = persist.parse_key(key)[1] if len(key) == 17 else -1
            if seq < 0:
                store.quarantine(persist.CF, key, value, f"AMQP message key of {len(key)} bytes")
                continue
            if mq is None:  # maybe a lost queue's
                store.quarantine(persist.CF, key, value,
                                 f"message {seq} of quarantined queue #{qid}")
                continue
            try:
                exchange, routing_key, props, body, expires = persist.decode_record(value)
                scan_properties(props)
            except (ValueError, IndexError, struct.error, AmqpError) as exc:
                store.quarantine(persist.CF, key, value,
                                 f"message {seq} of queue {mq.name!r}: {exc}")
                continue
            loaded.append((mq, QueuedMessage(seq, exchange, routing_key, props, body, True,
                                             True, expires)))
            mq.next_seq = seq + 1
            messages += 1
    # Enqueued only once every queue knows its next seq: a message dropped at a length
    # limit during recovery may be dead-lettered into another recovered queue, and its
    # new record must not take the key of one not loaded yet.
    for mq, msg in loaded:
        mq.enqueue(msg)
        if msg.expires:
            mq.ttl_seen = True
    del loaded
    for q in by_qid.values():
        if q.paged is not None:
            paging.trim(q)
    for q in by_qid.values():
        q.arm()  # head expiry (TTLs kept running while the server was down), x-expires
    for qid in orphans:
        store.stage_delete_range(persist.CF, *persist.queue_range(qid))
    for prefix in (persist.META_PREFIX, persist.LEVEL_META_PREFIX):
        for key, _value in store.iter_raw(persist.CF, prefix):
            if len(key) < 9 or persist.parse_meta_key(key) not in by_qid:
                store.stage_delete_key(persist.CF, key)  # the counters of a queue gone
    for q in by_qid.values():
        messages -= q.dropped
        q.published = 0
    return len(by_qid), messages


def _qids_with_messages(store: Any) -> list[int]:
    """The queue ids that have message records: one seek per queue, not one step per
    message (a key too short to name a queue is moved aside)."""
    qids: list[int] = []
    start, end = persist.MSG_PREFIX, b"n"  # every key under "m"
    while pairs := store.read_range(persist.CF, start, end, 1):
        key, value = pairs[0]
        if len(key) < 9:
            store.quarantine(persist.CF, key, value, f"AMQP message key of {len(key)} bytes")
            start = key + b"\x00"
            continue
        qid = int.from_bytes(key[1:9], "big")
        qids.append(qid)
        if qid == (1 << 64) - 1:
            break
        start = persist.queue_range(qid)[1]
    return qids

"""Offline views for the CLI when no server runs: the same rows as the live admin handlers
(``queues``, ``exchanges``, ``bindings``), computed from the ``_amqp`` documents and the
``amqp`` column family.  Queue and exchange rows come from the live objects' own ``row()``
(built from the documents, never recovered), so live-only figures (unacked, consumers,
counters) are 0 offline and a new column appears in both."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oxiedge.amqp import persist
from oxiedge.amqp.exchanges import binding_row, exchange_binding_row
from oxiedge.amqp.queues import Queue
from oxiedge.amqp.stream import log_figures, open_log
from oxiedge.amqp.stream_args import is_stream
from oxiedge.amqp.topology import builtin_exchanges, exchange_of_doc


def _queue_rows(store: Any) -> list[dict[str, Any]]:
    queues, _, _ = persist.load_docs(store)
    ready: dict[int, int] = {}
    for key, _value in store.iter_raw(persist.CF, persist.MSG_PREFIX):
        qid, _seq = persist.parse_key(key)
        ready[qid] = ready.get(qid, 0) + 1
    rows = []
    for doc in sorted(queues, key=lambda d: d["name"]):
        arguments = doc.get("arguments") or {}
        q = Queue(doc["name"], int(doc["qid"]), durable=True,
                  auto_delete=doc.get("auto_delete", False), arguments=arguments)
        row = q.row()
        # What the data dir says: its stored messages, the queue's own length limit.
        row.update(ready=ready.get(q.qid, 0), type=arguments.get("x-queue-type", "classic"),
                   limit=arguments.get("x-max-length"))
        if is_stream(arguments):  # its segment records say how long it is
            log = open_log(store, q.qid, arguments)
            log.recover()
            row.update(log_figures(log))
        rows.append(row)
    return rows


def _exchange_rows(store: Any) -> list[dict[str, Any]]:
    _, exchanges, binds = persist.load_docs(store)
    count: dict[str, int] = {}
    for b in binds:
        count[b["exchange"]] = count.get(b["exchange"], 0) + 1
    rows = []
    for x in [*builtin_exchanges(), *map(exchange_of_doc, exchanges)]:
        row = x.row()
        row["bindings"] = count.get(x.name, 0)  # the stored ones (where x is the source)
        rows.append(row)
    return sorted(rows, key=lambda r: r["name"])


def _binding_rows(store: Any) -> list[dict[str, Any]]:
    queues, _, binds = persist.load_docs(store)
    rows = [binding_row("", q["name"], q["name"], True) for q in queues]
    for b in binds:
        if "destination_exchange" in b:
            rows.append(exchange_binding_row(b["exchange"], b["destination_exchange"],
                                             b.get("routing_key", ""), True))
        else:
            rows.append(binding_row(b["exchange"], b["queue"], b.get("routing_key", ""), True))
    return rows


def offline_views(store: Any) -> dict[str, Callable[[], list[dict[str, Any]]]]:
    """``{"queues"|"exchanges"|"bindings": fn}`` reading the store directly."""
    return {
        "queues": lambda: _queue_rows(store),
        "exchanges": lambda: _exchange_rows(store),
        "bindings": lambda: _binding_rows(store),
    }


def register_offline_message_view(store: Any) -> None:
    """Show stored messages as ``_kind: "qmsg"`` documents when no server runs."""
    def names() -> dict[int, str]:
        queues, _, _ = persist.load_docs(store)
        return {int(d["qid"]): d["name"] for d in queues}

    store.register_view(persist.COLL,
                        lambda: persist.iter_message_docs(store, names().get))

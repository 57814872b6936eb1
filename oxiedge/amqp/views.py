"""Offline views for the CLI when no server runs: the same rows as the live admin handlers
(``queues``, ``exchanges``, ``bindings``), computed from the ``_amqp`` documents and the
``amqp`` column family.  Live-only figures (unacked, consumers) are 0 offline."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oxiedge.amqp import persist
from oxiedge.amqp.broker import BUILTIN_EXCHANGES


def _queue_rows(store: Any) -> list[dict[str, Any]]:
    queues, _, _ = persist.load_docs(store)
    ready: dict[int, int] = {}
    for key, _value in store.iter_raw(persist.CF, persist.MSG_PREFIX):
        qid, _seq = persist.parse_key(key)
        ready[qid] = ready.get(qid, 0) + 1
    rows = []
    for doc in sorted(queues, key=lambda d: d["name"]):
        rows.append({
            "name": doc["name"], "durable": True, "exclusive": False,
            "auto_delete": doc.get("auto_delete", False), "ready": ready.get(int(doc["qid"]), 0),
            "unacked": 0, "consumers": 0, "dropped": 0, "expired": 0, "rejected": 0,
            "dead_lettered": 0,
            "type": (doc.get("arguments") or {}).get("x-queue-type", "classic"),
            "limit": (doc.get("arguments") or {}).get("x-max-length"),
            "published": 0, "delivered": 0, "arguments": doc.get("arguments") or {},
        })
    return rows


def _exchange_rows(store: Any) -> list[dict[str, Any]]:
    _, exchanges, binds = persist.load_docs(store)
    count: dict[str, int] = {}
    for b in binds:
        count[b["exchange"]] = count.get(b["exchange"], 0) + 1
    rows = [{"name": "", "type": "direct", "durable": True, "auto_delete": False,
             "internal": False, "alternate_exchange": None, "bindings": 0, "published": 0,
             "unroutable": 0}]
    for name, kind in BUILTIN_EXCHANGES:
        rows.append({"name": name, "type": kind, "durable": True, "auto_delete": False,
                     "internal": False, "alternate_exchange": None,
                     "bindings": count.get(name, 0), "published": 0, "unroutable": 0})
    for doc in exchanges:
        rows.append({"name": doc["name"], "type": doc["type"], "durable": True,
                     "auto_delete": doc.get("auto_delete", False),
                     "internal": doc.get("internal", False),
                     "alternate_exchange": (doc.get("arguments") or {}).get(
                         "alternate-exchange"),
                     "bindings": count.get(doc["name"], 0), "published": 0, "unroutable": 0})
    return sorted(rows, key=lambda r: r["name"])


def _binding_rows(store: Any) -> list[dict[str, Any]]:
    queues, _, binds = persist.load_docs(store)
    rows = [{"exchange": "", "queue": q["name"], "routing_key": q["name"], "durable": True}
            for q in queues]
    for b in binds:
        if "destination_exchange" in b:
            rows.append({"exchange": b["exchange"], "queue": None,
                         "destination_exchange": b["destination_exchange"],
                         "routing_key": b.get("routing_key", ""), "durable": True})
        else:
            rows.append({"exchange": b["exchange"], "queue": b["queue"],
                         "routing_key": b.get("routing_key", ""), "durable": True})
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

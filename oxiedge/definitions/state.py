"""The state a definitions document describes, read from a store and the access files.

One reader for a running server (called in a worker thread: the reads are RocksDB's) and a
stopped one (the CLI opens the data dir itself): the durable AMQP objects are the ``_amqp``
documents (with their arguments, which the listing rows leave out), ingest routes and
uplinks the ``_config`` documents, indexes the store's definitions. What comes from the
configuration (``--ingest``, the ``--config`` file's uplinks) is not in the store, so not in
the document: it is the device's configuration, not its definitions.
"""

from __future__ import annotations

from typing import Any

from .document import State


def read_state(store: Any, users: dict[str, str], permissions: dict[str, Any]) -> State:
    """``store``'s definitions with ``users`` (name -> stored hash) and the permissions
    document (validated, ``access/rules.py``)."""
    from ..amqp import persist

    queues, exchanges, binds = persist.load_docs(store)
    ingest = []
    for doc in store.find("_config", {"_kind": "route"}):
        if isinstance(doc.get("filter"), str) and isinstance(doc.get("collection"), str):
            ingest.append({k: doc[k] for k in ("filter", "collection", "max_docs", "max_age")
                           if doc.get(k) is not None})
    uplinks = [doc for doc in store.find("_config", {"_kind": "uplink"})
               if isinstance(doc.get("name"), str)]
    indexes = [{"collection": r["collection"], "field": r["field"]}
               for r in store.indexes.rows(None)]
    return State(users=sorted(users.items()), permissions=permissions, queues=queues,
                 exchanges=exchanges, bindings=binds, ingest=ingest, indexes=indexes,
                 uplinks=uplinks)


def offline_state(store: Any, users_path: Any, data: Any) -> State:
    """The state of a stopped server's data dir (its password and permissions files)."""
    from ..access.rules import path_for, read_file
    from ..auth import read_user_file

    return read_state(store, read_user_file(users_path), read_file(path_for(data)))

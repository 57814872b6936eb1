"""The definitions import on a stopped server's data dir (``oxiedge definitions import``
with no server running): the same operation (``definitions/operation.py``: checked whole,
planned, then applied step by step) over an :class:`OfflineTarget` instead of a running
server.

Theory of operation
-------------------
Each step is done by the code the running server uses for it, on the store the CLI opened
(its lock keeps a server from starting on the data dir meanwhile): queues, exchanges and
bindings by the AMQP operations (``amqp/operations.py``) over a :class:`~oxiedge.amqp.
broker.Broker` that recovered the data dir's durable state first, each committed before the
next; ingest routes, indexes and uplinks by their offline forms (``ingest/stored.py``,
``ingest/indexes.py``, ``uplink/manager.py``, as ``oxiedge ingest|index|uplink add`` on a
data dir); permissions, tags and ACLs through ``access/edit.py`` under the permissions
file's lock; users through the password file's one writer (``auth.put_user``). The broker
is built at the first AMQP step only, so a dry run or a document without AMQP objects
reads no messages. Secret references come only from the CLI's environment (there is no
server environment to ask).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from ..definitions.document import State
from ..definitions.operation import DefinitionsOperations
from ..definitions.state import offline_state
from ..operations import BAD_REQUEST, OperationError, handlers
from .protocol import call_handler

#: Admin operations a definitions import runs, done by the AMQP broker's operations.
_AMQP_OPS = ("queue.declare", "exchange.declare", "binding.add")


class OfflineTarget:
    """``definitions.operation.Target`` over an open store of a stopped server."""

    def __init__(self, store: Any, data: Path, users_path: Path) -> None:
        self.store = store
        self.data = data
        self.users_path = users_path
        self._amqp: dict[str, Any] | None = None

    async def state(self) -> State:
        return offline_state(self.store, self.users_path, self.data)

    def _amqp_table(self) -> dict[str, Any]:
        if self._amqp is None:
            from ..amqp import recovery
            from ..amqp.broker import Broker
            from ..amqp.operations import AmqpOperations

            broker = Broker(self.store)
            recovery.recover(broker)
            self.store.commit_blocking()  # (clean-ups recovery staged, as at start-up)

            async def commit() -> None:
                self.store.commit_blocking()

            self._amqp = handlers(AmqpOperations(broker, list, {}, commit).operations())
        return self._amqp

    async def operate(self, name: str, args: dict[str, Any]) -> Any:
        if name in _AMQP_OPS:
            return await call_handler(self._amqp_table(), name, args, "not on a data dir")
        if name == "ingest.add":
            from ..ingest.stored import add_route_offline

            return add_route_offline(self.store, args["route"], args.get("max_docs"),
                                     args.get("max_age"))
        if name == "index.add":
            from ..ingest.indexes import add_offline

            return add_offline(self.store, args["collection"], args["field"])
        if name == "uplink.add":
            from ..uplink.manager import add_offline as add_uplink

            return add_uplink(self.store, args["definition"])
        if name == "permissions.apply":
            from ..access.edit import apply
            from ..access.rules import editing, path_for

            with editing(path_for(self.data)) as doc:
                return {"message": apply(doc, args["op"], args.get("args") or {})}
        raise OperationError(f"{name}: not done on a data dir", BAD_REQUEST)

    async def put_user(self, name: str, stored_hash: str) -> None:
        from ..auth import put_user

        put_user(self.users_path, name, stored_hash)

    def secret(self, name: str) -> str | None:
        del name  # only the CLI's own environment, which it passes as ``secrets``
        return None


def import_offline(store: Any, data: Path, users_path: Path, document: Any, *,
                   dry_run: bool = False, secrets: dict[str, str] | None = None
                   ) -> dict[str, Any]:
    """``definitions.import`` on ``store`` (blocking: runs the operation in its own trio
    loop); the same result as the running server's."""
    ops = DefinitionsOperations(OfflineTarget(store, data, users_path))
    return trio.run(lambda: ops.import_(document, dry_run=dry_run, secrets=secrets))

"""The definitions operation's :class:`~oxiedge.definitions.operation.Target` on a running
server: the state read in a worker thread, changes through the admin handler table (the
same dictionary ``server.py`` fills as the brokers start), users added to the password file
through its one writer (``auth.put_user``, as ``oxiedge user add``), secrets from the
server's environment."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import trio

from ..app import App
from ..auth import put_user
from ..definitions.document import State
from ..definitions.state import read_state
from ..operations import UNAVAILABLE, OperationError
from .protocol import call_handler


class ServerTarget:
    """``Target`` over one ``oxiedge serve`` process."""

    def __init__(self, app: App, handlers: dict[str, Callable[[dict[str, Any]], Any]]) -> None:
        self.app = app
        self.handlers = handlers

    async def state(self) -> State:
        users = {name: self.app.users.hash_of(name) or "" for name in self.app.users.names}
        perms = self.app.permissions.doc
        return await trio.to_thread.run_sync(read_state, self.app.store, users, perms)

    async def operate(self, name: str, args: dict[str, Any]) -> Any:
        return await call_handler(self.handlers, name, args, "that part of the server is off")

    async def put_user(self, name: str, stored_hash: str) -> None:
        path = self.app.users.path
        if path is None:
            raise OperationError("this server has no password file", UNAVAILABLE)
        # the password file's one writer and lock (auth.py); fsync: off the event loop
        await trio.to_thread.run_sync(put_user, path, name, stored_hash)
        self.app.users.reload()

    def secret(self, name: str) -> str | None:
        return os.environ.get(name)

"""The definitions operation's :class:`~oxiedge.definitions.operation.Target` on a running
server: the state read in a worker thread, changes through the admin handler table (the
same dictionary ``server.py`` fills as the brokers start), users added to the password file
as ``oxiedge user add`` does, secrets from the server's environment."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import trio

from ..app import App
from ..auth import read_user_file, write_user_file
from ..definitions.document import State
from ..definitions.state import read_state
from ..operations import UNAVAILABLE, OperationError
from .protocol import call_handler


class ServerTarget:
    """``Target`` over one ``oxiedge serve`` process."""

    def __init__(self, app: App, handlers: dict[str, Callable[[dict[str, Any]], Any]]) -> None:
        self.app = app
        self.handlers = handlers
        self._user_file = trio.Lock()

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

        def write() -> None:
            users = read_user_file(path)
            users[name] = stored_hash
            write_user_file(path, users)  # atomic, fsynced: off the event loop

        async with self._user_file:
            await trio.to_thread.run_sync(write)
            self.app.users.reload()

    def secret(self, name: str) -> str | None:
        return os.environ.get(name)

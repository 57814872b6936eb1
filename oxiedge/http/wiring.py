"""The HTTP listener wired to a running server: :class:`ServerView` implements
``routes.BrokerView`` over the same status and rows the admin socket serves (the admin
handler table that ``server.py`` builds), and :func:`build` assembles the listener."""

from __future__ import annotations

import os
import resource
import socket
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import trio

from ..access.grants import Grants
from ..admin.protocol import call_handler
from ..admin.server import StatusPart, server_status
from ..app import App
from ..auth import hash_password, put_user, remove_user
from ..console import console_routes
from ..histogram import Histogram
from ..operations import BAD_REQUEST, NOT_FOUND, UNAVAILABLE, OperationError
from ..tls import TlsManager
from .access import HASH_PREFIXES, Principal
from .api import api_routes
from .compat import compat_routes
from .credentials import Credentials
from .definitions import definition_routes
from .history import INTERVAL_S, SECTIONS, RateHistory
from .imports import import_routes
from .listener import HttpServer
from .local_api import local_routes
from .messaging import message_routes
from .metrics import Snapshot
from .nodes import node_routes, user_routes
from .routes import Router, health_routes, metrics_routes
from .writes import write_routes

#: A commit round's sync that has hung this long makes /healthz fail (the disk is gone).
SYNC_STUCK_S = 10.0
#: Queue rows made per turn of the event loop (~1 ms of work on the development VM).
QUEUE_SLICE = 250
_PROTOCOLS = {"mqtt": "mqtt", "mqtt_tls": "mqtt/ssl", "amqp": "amqp", "amqp_tls": "amqp/ssl",
              "http": "http", "http_tls": "https"}


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


class QueueRows(Protocol):
    """What the AMQP service offers of its queue rows (``AmqpService``)."""

    def queue_row_slices(self, size: int = ...) -> Iterator[list[dict[str, Any]]]: ...

    def queue_row(self, name: str) -> dict[str, Any] | None: ...


class ServerView:
    """``routes.BrokerView`` over one ``oxiedge serve`` process."""

    def __init__(self, app: App, handlers: dict[str, Callable[[dict[str, Any]], Any]],
                 parts: dict[str, StatusPart], amqp: QueueRows | None = None) -> None:
        self.app = app
        self.amqp = amqp
        self.handlers = handlers
        self.parts = parts
        self.ready = False  # set by server.py when it logs "oxiedge ready"
        # One writer of the password file at a time (as the CLI, it rewrites it whole), and
        # one password hashed at a time for the API (PBKDF2: never on the event loop).
        self._hashing = trio.CapacityLimiter(1)
        self.node = f"oxiedge@{socket.gethostname()}"
        self.cluster = app.config.device_id or self.node
        self.history = RateHistory()  # the console's charts (docs/console.md)

    def status(self) -> dict[str, Any]:
        return server_status(self.app, self.parts)

    def rows(self, kind: str) -> list[dict[str, Any]] | None:
        handler = self.handlers.get(kind)
        if handler is None:
            return None
        result = handler({})
        return result if isinstance(result, list) else None

    async def queue_rows(self) -> list[dict[str, Any]] | None:
        if self.amqp is None:
            return None
        rows: list[dict[str, Any]] = []
        for piece in self.amqp.queue_row_slices(QUEUE_SLICE):
            rows.extend(piece)
            await self.pause()
        return rows

    def queue_row(self, name: str) -> dict[str, Any] | None:
        return None if self.amqp is None else self.amqp.queue_row(name)

    def snapshot(self) -> Snapshot:
        alarms = self.app.alarms
        return Snapshot(status=self.status(), node=self.node, cluster=self.cluster,
                        rss_bytes=alarms.rss, memory_limit_bytes=alarms.memory_limit,
                        disk_free_bytes=alarms.disk_free,
                        disk_free_limit_bytes=alarms.disk_free_limit,
                        open_fds=_open_fds(),
                        max_fds=resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                        histograms=self._histograms())

    def _histograms(self) -> list[tuple[str, str, Histogram]]:
        committer = self.app.store.committer
        return [("oxiedge_store_commit_round_seconds", "A commit round from its write to "
                 "the end of its WAL sync", committer.round_seconds),
                ("oxiedge_store_commit_batch_operations", "Operations written by one commit "
                 "round", committer.batch_operations)]

    def durable_problem(self) -> str | None:
        committer = self.app.store.committer
        if committer.failed is not None:
            return f"durable writes stopped: {committer.failed}"
        stuck = committer.stuck_for()
        if stuck >= SYNC_STUCK_S:
            return f"a commit round's sync has not returned for {stuck:.0f} s"
        return None

    def not_ready(self) -> str | None:
        if not self.ready:
            return "starting: recovery or listeners not done"
        problem = self.durable_problem()
        if problem is not None:
            return problem
        if self.app.alarms.blocked:
            return f"resource alarm: {self.app.alarms.reason}"
        return None

    def listeners(self) -> list[dict[str, Any]]:
        out = []
        for key, endpoint in self.app.endpoints.items():
            host, _, port = endpoint.rpartition(":")
            out.append({"protocol": _PROTOCOLS.get(key, key), "ip_address": host,
                        "port": int(port) if port.isdigit() else port})
        return out


    def users(self) -> list[dict[str, Any]]:
        users = self.app.users
        return [{"name": name, "tags": self.app.permissions.tags(name),
                 "password_hash": users.hash_of(name) or ""} for name in users.names]

    def permissions(self) -> dict[str, dict[str, Any]]:
        users = self.app.permissions.doc.get("users", {})
        return {name: dict(entry) for name, entry in users.items()}

    async def operate(self, name: str, args: dict[str, Any]) -> Any:
        return await call_handler(self.handlers, name, args, "that broker is off on this server",
                                  named=False)

    async def put_user(self, name: str, password: bytes | None, password_hash: str | None
                       ) -> bool:
        path = self.app.users.path
        if path is None:
            raise OperationError("this server has no password file", UNAVAILABLE)
        if password_hash is not None:
            if not password_hash.startswith(HASH_PREFIXES):
                raise OperationError("password_hash: not a hash oxiedge can verify (oxiedge's "
                                     "pbkdf2_sha256$..., Mosquitto's $7$ or $6$)", BAD_REQUEST)
            encoded = password_hash
        else:
            assert password is not None
            encoded = await trio.to_thread.run_sync(hash_password, password,
                                                    limiter=self._hashing)
        # the password file's one writer and lock (auth.py); fsync: off the event loop
        added = await trio.to_thread.run_sync(put_user, path, name, encoded)
        self.app.users.reload()
        return added

    async def delete_user(self, name: str) -> None:
        path = self.app.users.path
        if path is None:
            raise OperationError("this server has no password file", UNAVAILABLE)
        if not await trio.to_thread.run_sync(remove_user, path, name):
            raise OperationError(f"no user {name!r}", NOT_FOUND)
        self.app.users.reload()
        await self.operate("permissions.apply", {"op": "forget", "args": {"user": name}})

    async def sample_history(self) -> None:
        """Sample the counters into :attr:`history` every ``INTERVAL_S`` (a task of the
        listener's nursery, from start-up: a chart has history the moment a page opens)."""
        while True:
            self.history.sample(trio.current_time(), self._sampled())
            await trio.sleep(INTERVAL_S)

    def _sampled(self) -> dict[str, Any]:
        """The status sections the ring reads (``history.SECTIONS``), not the whole status:
        an idle broker pays for these every ``INTERVAL_S`` from start-up."""
        out: dict[str, Any] = {}
        for name in SECTIONS:
            part = self.app.services.get(name) or self.parts.get(name)
            if part is not None:
                out[name] = part.status()
        return out

    async def pause(self) -> None:
        await trio.sleep(0)

    def may(self, user: Principal, op: str, name: str) -> bool:
        who = None if user.anonymous else user.name
        return Grants(self.app.permissions, who).amqp(op, name)


def build(app: App, handlers: dict[str, Callable[[dict[str, Any]], Any]],
          parts: dict[str, StatusPart], tls: TlsManager | None,
          amqp: QueueRows | None = None) -> tuple[HttpServer, ServerView]:
    """The listener and its view (``view.ready`` is the caller's to set); ``amqp``: the AMQP
    service's queue rows, when it runs."""
    view = ServerView(app, handlers, parts, amqp)
    credentials = Credentials(app.users, app.logins, app.permissions.tags)
    router = Router()
    health_routes(router, view)
    metrics_routes(router, view)
    api_routes(router, view)
    node_routes(router, view)
    user_routes(router, view)
    write_routes(router, view)
    message_routes(router, view)
    compat_routes(router, view)
    definition_routes(router, view)
    import_routes(router, view)
    local_routes(router, view)
    console_routes(router, view, credentials)  # last: its pages load at the first visit
    return HttpServer(router, credentials, app.connections, tls, app.log), view

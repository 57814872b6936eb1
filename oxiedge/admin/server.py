"""Serve the admin socket inside ``oxiedge serve``.

Handlers are plain callables ``handler(args) -> result`` (sync or async). Slow reads (``find``
over a large collection) run in a worker thread so the brokers keep serving.
"""

from __future__ import annotations

import errno
import inspect
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import trio

from .. import __version__
from ..app import App
from ..definitions.operation import DefinitionsOperations
from ..histogram import Histogram
from ..operations import OperationError, Streamed, handlers, jsonable
from ..sizes import parse_memory_watermark, parse_size
from ..store import QueryError, StoreError
from ..store.format import FORMAT_VERSION
from ..uplink.definitions import redact_documents
from . import export
from .definitions import ServerTarget
from .health import HealthChecks
from .protocol import MAX_REQUEST, AdminError, decode_request, encode

Handler = Callable[[dict[str, Any]], Any]


class StatusPart(Protocol):
    """A part of the server whose counters join ``oxiedge status`` under its name."""

    def status(self) -> dict[str, Any]: ...


def core_handlers(app: App, parts: dict[str, StatusPart] | None = None) -> dict[str, Handler]:
    """Operations every server answers, independent of the brokers. ``parts``: the parts
    besides the brokers whose ``status()`` joins ``status`` (``server.py`` adds each one as
    it builds it)."""
    parts = {} if parts is None else parts
    store = app.store

    async def find(args: dict[str, Any]) -> list[dict[str, Any]] | Streamed:
        coll = _need_str(args, "collection")
        limit = args.get("limit")
        if (args.get("progress") and export.streams(coll, args.get("sort"))
                and store.indexes.plan(coll, args.get("filter")) is None):  # else: the index
            return Streamed(lambda emit: export.find_with_progress(
                store, coll, args.get("filter"), None if limit is None else int(limit),
                int(args.get("skip") or 0), emit))
        docs = await trio.to_thread.run_sync(
            lambda: store.find(coll, args.get("filter"), args.get("sort"),
                               None if limit is None else int(limit), int(args.get("skip") or 0))
        )
        return redact_documents(coll, docs)

    async def count(args: dict[str, Any]) -> int:
        coll = _need_str(args, "collection")
        return await trio.to_thread.run_sync(lambda: store.count(coll, args.get("filter")))

    async def collections(_args: dict[str, Any]) -> list[dict[str, Any]]:
        return await trio.to_thread.run_sync(store.list_collections)

    def alarms_set(args: dict[str, Any]) -> dict[str, Any]:
        """Change the alarm limits at run time (like rabbitmqctl set_disk_free_limit)."""
        alarms = app.alarms
        if args.get("memory_high_watermark") is not None:
            alarms.memory_limit = parse_memory_watermark(str(args["memory_high_watermark"]),
                                                         alarms.memory_available)
        if args.get("disk_free_limit") is not None:
            alarms.disk_free_limit = parse_size(str(args["disk_free_limit"]))
        alarms.check()
        return alarms.status()

    def users_reload(_args: dict[str, Any]) -> dict[str, Any]:
        app.users.reload()
        app.log.info("users reloaded: %s", app.users.mode())
        return {"users": len(app.users.names)}

    async def permissions_apply(args: dict[str, Any]) -> dict[str, Any]:
        """One named change to DATA/permissions.json (``access/edit.py``), made by the server
        that owns the file, then applied to live connections."""
        from ..access.edit import apply
        from ..access.rules import editing

        op, change, path = _need_str(args, "op"), args.get("args") or {}, app.permissions.path
        if not isinstance(change, dict) or path is None:
            raise AdminError("permissions.apply needs 'op' and an 'args' object")

        def run() -> str:
            with editing(path) as doc:
                return apply(doc, op, change)

        message = await trio.to_thread.run_sync(run)  # fsync: not on the event loop
        app.permissions.reload()
        return {"message": message, **app.permissions.status()}

    def permissions_reload(_args: dict[str, Any]) -> dict[str, Any]:
        # The CLI rewrote DATA/permissions.json: live connections see it at their next check.
        app.permissions.reload()
        return app.permissions.status()

    def uplink_status() -> dict[str, Any]:
        part = parts.get("uplink")  # (server.py adds the uplinks once they are recovered)
        return part.status() if part is not None else {}

    health = HealthChecks(app, uplink_status)
    table: dict[str, Handler] = {
        **handlers(health.operations()),
        "ping": lambda _a: {"pong": True, "pid": os.getpid()},
        "status": lambda _a: server_status(app, parts),
        "find": find,
        "count": count,
        "collections": collections,
        "users.reload": users_reload,
        "permissions.reload": permissions_reload,
        "permissions.apply": permissions_apply,
        "alarms.set": alarms_set,
    }
    # The definitions import runs the operations the brokers add to this same table later.
    table.update(handlers(DefinitionsOperations(ServerTarget(app, table)).operations()))
    return table


def _round_ms(hist: Histogram) -> dict[str, float | None]:
    """The commit round's latency since start, estimated from its histogram's buckets (a
    dict, so ``/metrics`` leaves it to the histogram it exports)."""
    out: dict[str, float | None] = {}
    for name, q in (("p50", 0.5), ("p99", 0.99)):
        value = hist.quantile(q)
        out[name] = None if value is None else round(value * 1000, 2)
    return out


def server_status(app: App, parts: dict[str, StatusPart] | None = None) -> dict[str, Any]:
    committer = app.store.committer
    out: dict[str, Any] = {
        "version": __version__,
        "pid": os.getpid(),
        "uptime_s": round(time.time() - app.started_at, 1),
        "data": str(app.config.data),
        "endpoints": dict(app.endpoints),
        "store": {
            "commit_rounds": committer.rounds,
            "committed_ops": committer.ops,
            "commit_round_ms": _round_ms(committer.round_seconds),
            "durable_writes": "STOPPED: " + str(committer.failed) if committer.failed else "ok",
            "format_version": FORMAT_VERSION,
            "quarantine": app.store.quarantine_status(),
        },
        "alarms": {**app.alarms.status(), **app.blocked.status()},
        "connections": {**app.connections.status(),
                        "close_lines_suppressed": app.close_lines.suppressed_total},
        "logins": app.logins.status(),
        "permissions": app.permissions.status(),
    }
    for name, service in app.services.items():
        out[name] = service.status()
    for name, part in (parts or {}).items():
        out[name] = part.status()
    return out


def _need_str(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value:
        raise AdminError(f"missing argument {key!r}")
    return value


class AdminServer:
    """Accepts admin connections on ``<data>/admin.sock`` (owner-only unless ``group``)."""

    def __init__(self, app: App, handlers: dict[str, Handler], path: Path,
                 mode: int = 0o600) -> None:
        self.app = app
        self.handlers = handlers
        self.path = path
        self.mode = mode

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        # We hold the database lock, so a socket file left here is a dead server's.
        try:
            if stat.S_ISSOCK(os.lstat(self.path).st_mode):
                os.unlink(self.path)
        except FileNotFoundError:
            pass
        old_umask = os.umask(0o177)
        try:
            await sock.bind(str(self.path))
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG or "too long" in str(exc):
                raise AdminError(f"admin socket path too long: {self.path}") from exc
            raise
        finally:
            os.umask(old_umask)
        os.chmod(self.path, self.mode)
        sock.listen(16)
        listener = trio.SocketListener(sock)
        task_status.started()
        try:
            async with trio.open_nursery() as nursery:
                await trio.serve_listeners(self._handle, [listener], handler_nursery=nursery)
        finally:
            with trio.CancelScope(shield=True):
                try:
                    os.unlink(self.path)
                except OSError:
                    pass

    async def _handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            try:
                line = await _read_line(stream)
                op, args = decode_request(line)
                handler = self.handlers.get(op)
                if handler is None:
                    raise AdminError(f"unknown admin operation {op!r}")
                result = handler(args)
                if inspect.isawaitable(result):
                    result = await result
                if isinstance(result, Streamed):
                    result = await _stream(stream, result)
                reply = {"ok": True, "result": result}
            except OperationError as exc:
                reply = {"ok": False, "error": str(exc), "kind": exc.kind}
            except (AdminError, QueryError, StoreError, ValueError, KeyError, TypeError) as exc:
                reply = {"ok": False, "error": str(exc) or type(exc).__name__}
            except Exception as exc:  # an operator's request must never kill the server
                self.app.log.warning("admin request failed: %r", exc)
                reply = {"ok": False, "error": f"internal error: {exc!r}"}
            try:
                await stream.send_all(encode(reply))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass


async def _stream(stream: trio.SocketStream, streamed: Streamed) -> Any:
    """Send each event of ``streamed`` as an ``{"event": ...}`` line; returns its result.
    The client sends nothing after its request, so the end of its input means it went
    away: the operation is cancelled then (``oxiedge sub`` interrupted)."""
    result: Any = None
    failure: Exception | None = None

    async def emit(event: Any) -> None:
        await stream.send_all(encode({"event": jsonable(event)}))

    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            try:
                while await stream.receive_some(4096):
                    pass
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        try:
            result = jsonable(await streamed.run(emit))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # (the client went away while an event was sent)
        except Exception as exc:  # raised below as it is, not in the nursery's group
            failure = exc
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return result


async def _read_line(stream: trio.SocketStream) -> bytes:
    buf = bytearray()
    with trio.fail_after(10):
        while b"\n" not in buf:
            chunk = await stream.receive_some(65536)
            if not chunk:
                break
            buf += chunk
            if len(buf) > MAX_REQUEST:
                raise AdminError("request too large")
    return bytes(buf.split(b"\n", 1)[0])

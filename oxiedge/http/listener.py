"""The HTTP listener of ``oxiedge serve``: accept, the shared connection limits, TLS, and one
:class:`~oxiedge.http.connection.HttpConnection` per stream.

h11 is imported when the listener starts (``run``), not when oxiedge starts: a broker with
``--http-port off`` never loads it. The listener counts what each bound cut off
(``status()``, ``oxiedge status`` -> ``http``; the bounds are in ``connection.py`` and
docs/limits.md).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from .. import gcpolicy
from ..connections import ConnectionLimits
from ..gcpolicy import ANSWERS
from ..tls import TlsManager, open_secured
from .bounds import (
    BODY_TIMEOUT,
    HEADER_TIMEOUT,
    IDLE_TIMEOUT,
    MAX_BODY,
    MAX_HEADER_BYTES,
    MAX_REQUESTS,
)
from .credentials import Credentials

if TYPE_CHECKING:
    from .connection import WebSocketHost
from .routes import Router

COUNTER_NAMES = ("connections_total", "requests", "responses_2xx", "responses_4xx",
                 "responses_5xx", "header_too_large", "header_timeouts", "body_too_large",
                 "body_timeouts", "idle_closed", "request_limit_closed", "bad_requests",
                 "auth_failures", "write_timeouts")


class HttpServer:
    """Serves the router's endpoints on the listeners given to :meth:`run`."""

    def __init__(self, router: Router, credentials: Credentials, limits: ConnectionLimits,
                 tls: TlsManager | None, log: logging.Logger) -> None:
        self.router = router
        self.credentials = credentials
        self.limits = limits
        self.tls = tls
        self.log = log
        self.counters = dict.fromkeys(COUNTER_NAMES, 0)
        self.open = 0
        self._connection: Any = None
        #: MQTT over WebSocket at /mqtt and /ws (``oxiedge.ws``), set by ``server.py``
        self.websocket: WebSocketHost | None = None

    async def run(self, listeners: list[trio.abc.Listener[Any]],
                  task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        from . import connection  # h11 loads here, with the listener

        self._connection = connection.HttpConnection
        async with trio.open_nursery() as nursery:
            for listener in listeners:
                nursery.start_soon(trio.serve_listeners,
                                   self.limits.guard(self._handle, "HTTP"), [listener])
            nursery.start_soon(gcpolicy.watch)  # bounds the answers' collection pause
            task_status.started()

    async def _handle(self, stream: trio.abc.Stream) -> None:
        accepted_at = trio.current_time()
        self.counters["connections_total"] += 1
        self.open += 1
        try:
            go_on, identity = await open_secured(self.tls, stream, "HTTP")
            if go_on:
                await self._connection(self, stream, accepted_at, identity).serve()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except Exception:  # one broken connection must never take the broker down
            self.log.exception("HTTP connection failed")
        finally:
            self.open -= 1
            with trio.move_on_after(1) as scope:
                scope.shield = True
                try:
                    await stream.aclose()
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass
            if scope.cancelled_caught:
                await trio.aclose_forcefully(stream)

    def status(self) -> dict[str, Any]:
        return {"open": self.open, **self.counters,
                "auth_cache_hits": self.credentials.cache_hits,
                "gc_pauses": ANSWERS.pauses, "gc_pauses_cut": ANSWERS.cut,
                **{f"sessions_{k}": v for k, v in self.credentials.sessions.status().items()},
                "max_header_bytes": MAX_HEADER_BYTES, "header_timeout_s": HEADER_TIMEOUT,
                "max_body_bytes": MAX_BODY, "body_timeout_s": BODY_TIMEOUT,
                "idle_timeout_s": IDLE_TIMEOUT, "max_requests_per_connection": MAX_REQUESTS}

"""Which path does what, and who may ask (sans-IO).

:class:`Router` is a table of ``(method, path pattern) -> (what it needs, handler)``. A
pattern is a tuple of path segments, ``*`` matching any one (segments are compared after
percent-decoding, so the vhost ``/`` is the segment ``%2F``). ``route`` answers an unknown
path 404, a known path with another method 405 (with ``Allow``), and otherwise the route;
``call`` runs a handler and turns :class:`~oxiedge.http.messages.BadRequest` into the 400
naming the field - a handler never decides an error status by raising anything else.

The handlers see the broker only through :class:`BrokerView`, which the listener's wiring
implements over the same rows and status the admin socket serves.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..operations import BAD_REQUEST, FORBIDDEN, NOT_FOUND, UNAVAILABLE, OperationError
from .access import Need, Principal
from .history import RateHistory
from .messages import (
    PROMETHEUS_TEXT,
    BadRequest,
    Request,
    Response,
    error_response,
    json_response,
    not_found,
    text_response,
)
from .metrics import Snapshot, identity_family, render, render_per_object

#: A handler: the request, who asks, the path's ``*`` segments -> the answer (an ``async``
#: handler awaits the broker's operations; it does no I/O of its own).
Handler = Callable[[Request, Principal, tuple[str, ...]], Response | Awaitable[Response]]

#: ``OperationError.kind`` -> (status, RabbitMQ's error name).
_KIND_STATUS = {BAD_REQUEST: (400, "bad_request"), NOT_FOUND: (404, "Object Not Found"),
                FORBIDDEN: (403, "access_refused"), UNAVAILABLE: (503, "unavailable")}


class BrokerView(Protocol):
    """What the HTTP endpoints read of the running broker."""

    node: str
    cluster: str
    #: the counters sampled every few seconds since start-up (the console's charts)
    history: RateHistory

    def status(self) -> dict[str, Any]:
        """``oxiedge status`` as the admin socket serves it."""

    def rows(self, kind: str) -> list[dict[str, Any]] | None:
        """An admin socket's rows (``queues``, ``exchanges``, ``bindings``, ``sessions``,
        ``retained``); None when that broker is off."""

    async def queue_rows(self) -> list[dict[str, Any]] | None:
        """Every AMQP queue's row, as ``rows("queues")``, taken from the AMQP service a slice
        at a time with a turn of the event loop between slices; None when it is off."""

    def queue_row(self, name: str) -> dict[str, Any] | None:
        """One queue's row (None: no such queue, or the AMQP broker is off)."""

    def snapshot(self) -> Snapshot:
        """What one ``/metrics`` scrape renders."""

    def durable_problem(self) -> str | None:
        """Why durable writes do not work now (None: they do)."""

    def not_ready(self) -> str | None:
        """Why the broker is not ready (recovery, listeners, an alarm), or None."""

    def listeners(self) -> list[dict[str, Any]]:
        """``[{"protocol", "ip_address", "port"}]`` of the bound listeners."""

    def users(self) -> list[dict[str, Any]]:
        """``[{"name", "tags", "password_hash"}]`` of the broker's users (the hash is served
        only by the definitions export)."""

    def permissions(self) -> dict[str, dict[str, Any]]:
        """User name -> its entry of the permissions file (``vhosts``, ``topics``, ...)."""

    async def operate(self, name: str, args: dict[str, Any]) -> Any:
        """Run the operation ``name`` of the admin handler table (docs/operations.md) with
        JSON ``args``; its JSON result. Raises ``OperationError`` (``unavailable`` when the
        broker that has it is off)."""

    async def put_user(self, name: str, password: bytes | None, password_hash: str | None
                       ) -> bool:
        """Add the user ``name`` or change its password (hashed here, or a stored hash
        taken as it is); True if it was added. ``OperationError`` for a bad hash."""

    async def delete_user(self, name: str) -> None:
        """Remove the user and its permissions, ACLs and tags (``not_found`` if none)."""

    async def pause(self) -> None:
        """Let the event loop serve others for a turn (between slices of a long answer)."""

    def may(self, user: Principal, op: str, name: str) -> bool:
        """RabbitMQ's resource check of ``user``'s permissions: ``op`` (configure, write,
        read) on the queue or exchange ``name`` in vhost ``/``."""


@dataclass(frozen=True, slots=True)
class Route:
    methods: frozenset[str]
    pattern: tuple[str, ...]
    need: Need
    handler: Handler
    #: a console page: a browser without credentials is sent to the login form, not a 401
    page: bool = False

    def match(self, segments: tuple[str, ...]) -> tuple[str, ...] | None:
        if len(segments) != len(self.pattern):
            return None
        args = []
        for want, got in zip(self.pattern, segments, strict=True):
            if want == "*":
                args.append(got)
            elif want != got:
                return None
        return tuple(args)


class Router:
    """The route table (see the module docstring)."""

    def __init__(self) -> None:
        self.routes: list[Route] = []

    def add(self, methods: str, path: str, need: Need, handler: Handler,
            page: bool = False) -> None:
        pattern = tuple(s for s in path.split("/") if s)
        self.routes.append(Route(frozenset(methods.split()), pattern, need, handler, page))

    def route(self, request: Request) -> tuple[Route, tuple[str, ...]] | Response:
        allowed: set[str] = set()
        for r in self.routes:
            args = r.match(request.segments)
            if args is None:
                continue
            method = "GET" if request.method == "HEAD" else request.method
            if method in r.methods:
                return r, args
            allowed |= r.methods
        if not allowed:
            return not_found()
        out = error_response(405, "method_not_allowed",
                             f"{request.method} is not allowed here (allowed: "
                             f"{', '.join(sorted(allowed))})")
        out.headers.append(("allow", ", ".join(sorted(allowed))))
        return out

    @staticmethod
    async def call(route: Route, request: Request, who: Principal, args: tuple[str, ...]
                   ) -> Response:
        try:
            result = route.handler(request, who, args)
            if inspect.isawaitable(result):
                result = await result
            assert isinstance(result, Response)
            return result
        except BadRequest as exc:
            return error_response(exc.status, exc.error, exc.reason)
        except OperationError as exc:  # refused by the broker (docs/operations.md)
            status, error = _KIND_STATUS.get(exc.kind, (400, "bad_request"))
            return error_response(status, error, str(exc))


def health_routes(router: Router, broker: BrokerView) -> None:
    """``/healthz`` and ``/readyz``: no credentials, tiny bodies (systemd, load balancers)."""

    def healthz(_req: Request, _who: Principal, _args: tuple[str, ...]) -> Response:
        problem = broker.durable_problem()
        if problem is None:
            return json_response({"status": "ok"})
        return json_response({"status": "failed", "reason": problem}, 503)

    def readyz(_req: Request, _who: Principal, _args: tuple[str, ...]) -> Response:
        problem = broker.not_ready()
        if problem is None:
            return json_response({"status": "ok"})
        return json_response({"status": "failed", "reason": problem}, 503)

    router.add("GET", "/healthz", Need.NOTHING, healthz)
    router.add("GET", "/readyz", Need.NOTHING, readyz)


def metrics_routes(router: Router, broker: BrokerView) -> None:
    """``/metrics`` (aggregated, as RabbitMQ's default) and ``/metrics/per-object``."""

    def metrics(_req: Request, _who: Principal, _args: tuple[str, ...]) -> Response:
        return text_response(render(broker.snapshot()), content_type=PROMETHEUS_TEXT)

    async def per_object(_req: Request, _who: Principal, _args: tuple[str, ...]) -> Response:
        queues = await broker.queue_rows() or []
        head = identity_family(broker.node, broker.cluster, "per-object")
        pieces = (p.encode() for p in itertools.chain([head], render_per_object(queues)))
        return Response(200, content_type=PROMETHEUS_TEXT, chunks=pieces)

    router.add("GET", "/metrics", Need.READ, metrics)
    router.add("GET", "/metrics/per-object", Need.READ, per_object)

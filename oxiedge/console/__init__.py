"""The web console: server-rendered pages over the management API, on the HTTP listener.

Only :func:`console_routes` lives here, and it imports nothing but the route table's own
types: every page's handler imports :mod:`oxiedge.console.pages` (and through it the HTML,
the chart and the assets) the first time a page is asked for, so a broker whose console is
never opened keeps its idle memory (docs/console.md).

The pages read what the management API reads (``BrokerView``: ``oxiedge status``, the admin
rows, the operations); a button posts a form to ``/console/action``, which runs the very
management API route it names (``DELETE /api/queues/%2F/NAME/contents`` ...) as the same user,
after a CSRF check - there is no second implementation of any write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..http.access import Need, Principal
from ..http.messages import Request, Response

if TYPE_CHECKING:
    from ..http.credentials import Credentials
    from ..http.routes import BrokerView, Router

#: (method, path, what it needs, the page's name in ``pages.PAGES``)
ROUTES = (
    ("GET", "/", Need.READ, "overview"),
    ("GET", "/mqtt/sessions", Need.READ, "sessions"),
    ("GET", "/mqtt/retained", Need.READ, "retained"),
    ("GET", "/queues", Need.READ, "queues"),
    ("GET", "/queues/*", Need.READ, "queue"),
    ("GET", "/exchanges", Need.READ, "exchanges"),
    ("GET", "/connections", Need.READ, "connections"),
    ("GET", "/collections", Need.READ, "collections"),
    ("GET", "/collections/*", Need.READ, "collection"),
    ("GET", "/uplinks", Need.READ, "uplinks"),
    ("GET", "/users", Need.READ, "users"),
    ("GET", "/console/static/*", Need.NOTHING, "asset"),  # (the login page's stylesheet)
    ("POST", "/console/action", Need.ADMIN, "action"),
    ("GET", "/console/login", Need.NOTHING, "login"),
    ("POST", "/console/login", Need.NOTHING, "login.submit"),
    ("POST", "/console/logout", Need.NOTHING, "logout"),
)


class _Lazy:
    """Holds the console once a page has been asked for."""

    def __init__(self, router: Router, broker: BrokerView, credentials: Credentials) -> None:
        self.router = router
        self.broker = broker
        self.credentials = credentials
        self.console: Any = None

    def handler(self, page: str) -> Any:
        async def serve(req: Request, who: Principal, args: tuple[str, ...]) -> Response:
            if self.console is None:
                from .pages import Console  # the first page: load the console now

                self.console = Console(self.router, self.broker, self.credentials)
            result: Response = await self.console.serve(page, req, who, args)
            return result
        return serve


def console_routes(router: Router, broker: BrokerView, credentials: Credentials) -> None:
    """Add the console's pages to the HTTP listener's route table (a ``GET`` page sends a
    browser without credentials to the login form)."""
    lazy = _Lazy(router, broker, credentials)
    for method, path, need, page in ROUTES:
        router.add(method, path, need, lazy.handler(page),
                   page=method == "GET" and need is not Need.NOTHING)

"""The console's buttons: a form posted to ``/console/action`` runs one management API route.

There is no second implementation of a write: ``op`` names a route of the API's table
(:data:`ACTIONS`), which is looked up in the listener's own router and called as the user who
clicked, after the same tag check the listener makes (``access.refusal``) - so the API's
permission checks (``administrator``, the user's own AMQP permissions) and its answers apply
unchanged. The answer becomes a ``303`` back to the page with a one-line notice, which works
without JavaScript.

CSRF: the browser sends HTTP Basic credentials with any request to this origin, a forged
cross-site form included, so a write needs all of: a token in the form that only a page of
this console can know (an HMAC of the user name under a key made when the console starts);
an ``Origin`` header, when the browser sends one, naming this host; and no
``Sec-Fetch-Site: cross-site``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

import orjson

from ..http.access import Principal, refusal
from ..http.messages import BadRequest, Request, Response
from ..http.routes import Router
from ..http.sessions import foreign_origin

#: Longest form accepted (a name and a token; the API's own names are bounded lower).
MAX_FORM = 16384


#: Longest test message the form sends, and the part of a got message the notice shows.
MAX_TEST_MESSAGE = 4096
SHOWN_PAYLOAD = 200


def _test_message(queue: str, payload: str) -> dict[str, Any]:
    """RabbitMQ's publish body: ``payload`` to ``queue`` through the default exchange."""
    return {"routing_key": queue, "payload": payload[:MAX_TEST_MESSAGE],
            "payload_encoding": "string", "properties": {"delivery_mode": 2}}


#: A peek: one message, back in place (redelivered), as ``rabbitmqadmin get`` by default.
_PEEK = {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto",
         "truncate": SHOWN_PAYLOAD}


def _q(name: str) -> str:
    return quote(name, safe="")


def _user(form: dict[str, str]) -> dict[str, Any]:
    return {"password": form.get("password", ""), "tags": form.get("tags", "")}


def _permissions(form: dict[str, str]) -> dict[str, Any]:
    return {op: form.get(op, "") for op in ("configure", "write", "read")}


#: op -> the API request (method, path, JSON body) it makes for a target name and the
#: form's other fields.
ACTIONS: dict[str, Callable[[str, dict[str, str]], tuple[str, str, Any]]] = {
    "queue.purge": lambda n, _f: ("DELETE", f"/api/queues/%2F/{_q(n)}/contents", None),
    "queue.delete": lambda n, _f: ("DELETE", f"/api/queues/%2F/{_q(n)}", None),
    "queue.publish": lambda n, f: ("POST", "/api/exchanges/%2F/amq.default/publish",
                                   _test_message(n, f.get("payload", ""))),
    "queue.get": lambda n, _f: ("POST", f"/api/queues/%2F/{_q(n)}/get", _PEEK),
    "connection.close": lambda n, _f: ("DELETE", f"/api/connections/{_q(n)}", None),
    "session.delete": lambda n, _f: ("DELETE", f"/api/mqtt/sessions/{_q(n)}", None),
    "client.kick": lambda n, _f: ("DELETE", f"/api/mqtt/clients/{_q(n)}", None),
    "retained.clear": lambda n, _f: ("DELETE", f"/api/mqtt/retained?{urlencode({'topic': n})}",
                                     None),
    "index.add": lambda n, _f: ("PUT", f"/api/oxiedge/indexes/{_q(n)}/_received_at", None),
    "user.put": lambda n, f: ("PUT", f"/api/users/{_q(n)}", _user(f)),
    "user.delete": lambda n, _f: ("DELETE", f"/api/users/{_q(n)}", None),
    "permissions.put": lambda n, f: ("PUT", f"/api/permissions/%2F/{_q(n)}", _permissions(f)),
    "permissions.delete": lambda n, _f: ("DELETE", f"/api/permissions/%2F/{_q(n)}", None),
}


def local_path(path: str) -> str:
    """A path on this console to go back to ('/' for anything else). Only printable ASCII:
    a browser drops tabs and newlines from a ``Location`` (``/<TAB>/evil.example`` is
    ``//evil.example``, another host), and a header holds no other control character."""
    if (not path.startswith("/") or path.startswith("//") or "\\" in path
            or not all("!" <= ch <= "~" for ch in path)):
        return "/"
    return path.split("?", 1)[0]


def form_fields(body: bytes, max_fields: int) -> dict[str, str] | None:
    """A posted form's fields (None: more than ``max_fields``, which ``parse_qsl`` raises)."""
    try:
        return dict(parse_qsl(body.decode("utf-8", "replace"), max_num_fields=max_fields))
    except ValueError:
        return None


def cross_site(req: Request) -> str | None:
    """Why a form post did not come from a page of this console (None: it did)."""
    return foreign_origin(req.headers)


def _forbidden(reason: str) -> Response:
    return Response(403, reason.encode(), "text/plain; charset=utf-8")


class Actions:
    """Runs the console's forms (see the module docstring)."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self._key = secrets.token_bytes(32)

    def token(self, who: Principal) -> str:
        return hmac.new(self._key, who.name.encode(), hashlib.sha256).hexdigest()[:32]

    async def run(self, req: Request, who: Principal) -> Response:
        why = cross_site(req)
        if why is not None:
            return _forbidden(why)
        if len(req.body) > MAX_FORM:
            return _forbidden("form too large")
        form = form_fields(req.body, 16)
        if form is None:
            return _forbidden("too many form fields")
        # (bytes: compare_digest raises on a str with a character beyond ASCII)
        if not hmac.compare_digest(form.get("csrf", "").encode(), self.token(who).encode()):
            return _forbidden("missing or stale form token: reload the page and try again")
        op, target = form.get("op", ""), form.get("target", "")
        make = ACTIONS.get(op)
        if make is None:
            return _forbidden(f"unknown action {op[:40]!r}")
        method, target_path, body = make(target, form)
        notice = await self._call(method, target_path, body, who, f"{op} {target}")
        back = local_path(form.get("back", "/"))
        return Response(303, b"", "text/plain; charset=utf-8",
                        [("location", f"{back}?{urlencode({'msg': notice})}"),
                         ("cache-control", "no-store")])

    async def _call(self, method: str, path: str, body: Any, who: Principal, what: str
                    ) -> str:
        """Run the API route for ``method path`` (with the JSON ``body``) as ``who``; a
        one-line notice."""
        data = b"" if body is None else orjson.dumps(body)
        try:
            api = Request.parse(method, path, {"content-type": "application/json"}, data)
        except BadRequest as exc:
            return f"{what}: {exc.reason}"
        found = self.router.route(api)
        if isinstance(found, Response):
            return f"{what}: not found"
        route, args = found
        why = refusal(who, route.need)
        if why is not None:
            return f"{what}: refused ({why})"
        answer = await self.router.call(route, api, who, args)
        try:
            result = orjson.loads(answer.body) if answer.body else None
        except orjson.JSONDecodeError:
            result = None
        if answer.status >= 300:
            reason = result.get("reason", "") if isinstance(result, dict) else ""
            return f"{what}: failed ({answer.status} {reason})"
        return f"{what}: {_outcome(result)}"


def _outcome(result: Any) -> str:
    """The notice of an API answer: a publish's routing, a get's message, else done."""
    if isinstance(result, dict) and "routed" in result:
        return "published" if result["routed"] else "not routed (no such queue)"
    if isinstance(result, list):  # a get
        if not result:
            return "the queue is empty"
        got = result[0]
        text = got.get("payload", "")
        if got.get("payload_encoding") == "base64":
            text = f"(binary, base64) {text}"
        return (f"{got.get('payload_bytes', 0)} bytes, routing key "
                f"{got.get('routing_key', '')!r}: {text} (left in place)")
    return "done"

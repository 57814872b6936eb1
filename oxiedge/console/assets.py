"""The console's two files (``static/console.css``, ``static/console.js``), read from the
package once when first asked for and kept (a few KB)."""

from __future__ import annotations

from importlib import resources

from ..http.messages import Response, not_found

_TYPES = {"console.css": "text/css; charset=utf-8",
          "console.js": "text/javascript; charset=utf-8"}
_CACHE: dict[str, bytes] = {}


def asset(name: str) -> Response:
    kind = _TYPES.get(name)
    if kind is None:
        return not_found()
    body = _CACHE.get(name)
    if body is None:
        body = _CACHE[name] = (resources.files(__package__) / "static" / name).read_bytes()
    return Response(200, body, kind, [("cache-control", "max-age=300"),
                                      ("x-content-type-options", "nosniff")])

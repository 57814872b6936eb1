"""The opening handshake of a WebSocket at ``/mqtt`` or ``/ws`` (RFC 6455 section 4.2), sans-IO.

The HTTP connection (``oxiedge.http.connection``) has parsed the request with h11; this
module only decides: an :class:`Accept` (the ``101 Switching Protocols`` headers) or a
:class:`Refusal` (status, reason, extra headers) that the HTTP connection answers as any
other response. No wsproto here: deciding costs a header lookup, and a broker whose
clients never upgrade never loads it.

Rules, in the order they are checked:

* the method is GET (RFC 6455 4.1: 400 otherwise - a WebSocket path answers nothing else);
* ``Upgrade: websocket`` and ``Connection: upgrade`` are present; a plain GET of the path
  gets ``426 Upgrade Required`` with ``Upgrade: websocket`` (RFC 7231 6.5.15);
* ``Sec-WebSocket-Version: 13``, else 426 with ``Sec-WebSocket-Version: 13`` (RFC 6455 4.4);
* ``Sec-WebSocket-Key`` is 16 bytes in base64 (4.2.1 item 5), else 400;
* the subprotocol: the first of the client's list that we speak (``mqtt``, or ``mqttv3.1``
  for MQTT 3.1 clients); a list with neither is refused with 400 (MQTT-6.0.0-3/-4: the
  subprotocol names MQTT); no list at all is accepted without one (some browser code
  offers none).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

#: EMQX's and NanoMQ's path, and RabbitMQ's Web MQTT one.
PATHS = frozenset({"/mqtt", "/ws"})
#: In our order of preference; ``mqttv3.1`` is what MQTT 3.1 clients (MQTT.js v3) offer.
SUBPROTOCOLS = ("mqtt", "mqttv3.1")
#: RFC 6455 1.3: appended to the client's key before hashing.
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


@dataclass(frozen=True, slots=True)
class Accept:
    """The upgrade is accepted: the ``101`` response's headers."""

    subprotocol: str | None
    headers: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Refusal:
    """The upgrade is refused with this status (400, 403 or 426), reason and headers."""

    status: int
    reason: str
    headers: tuple[tuple[str, str], ...] = ()


def accept_token(key: str) -> str:
    """``Sec-WebSocket-Accept`` for a client's ``Sec-WebSocket-Key`` (RFC 6455 4.2.2)."""
    return base64.b64encode(hashlib.sha1(key.encode("ascii") + _GUID).digest()).decode()


def _tokens(value: str | None) -> list[str]:
    return [t.strip().lower() for t in (value or "").split(",") if t.strip()]


def decide(method: str, headers: dict[str, str]) -> Accept | Refusal:
    """Accept or refuse an upgrade request to a WebSocket path (``headers``: lower-case
    names, repeated headers joined with ", " as ``oxiedge.http.messages.Request`` has them)."""
    if method != "GET":
        return Refusal(400, f"a WebSocket is opened with GET, not {method}")
    if "websocket" not in _tokens(headers.get("upgrade")) \
            or "upgrade" not in _tokens(headers.get("connection")):
        return Refusal(426, "this path serves MQTT over WebSocket: send Upgrade: websocket "
                       "and Connection: upgrade", (("upgrade", "websocket"),
                                                   ("connection", "upgrade")))
    if "13" not in _tokens(headers.get("sec-websocket-version")):
        return Refusal(426, "WebSocket version 13 (RFC 6455) only",
                       (("sec-websocket-version", "13"),))
    key = headers.get("sec-websocket-key", "").strip()
    try:
        valid = len(base64.b64decode(key, validate=True)) == 16
    except (binascii.Error, ValueError):
        valid = False
    if not valid:
        return Refusal(400, "Sec-WebSocket-Key must be 16 bytes in base64")
    offered = headers.get("sec-websocket-protocol")
    chosen: str | None = None
    if offered is not None:
        names = [t.strip() for t in offered.split(",") if t.strip()]
        chosen = next((p for p in names if p in SUBPROTOCOLS), None)
        if chosen is None:
            return Refusal(400, f"subprotocol {', '.join(names)[:100]!r} is not spoken here: "
                           "offer mqtt (or mqttv3.1)")
    response = [("upgrade", "websocket"), ("connection", "Upgrade"),
                ("sec-websocket-accept", accept_token(key))]
    if chosen is not None:
        response.append(("sec-websocket-protocol", chosen))
    return Accept(chosen, tuple(response))

"""The management API's message endpoints (sans-IO): ``POST /api/exchanges/%2F/NAME/publish``
and ``POST /api/queues/%2F/NAME/get`` in RabbitMQ's JSON shapes (``rabbitmqadmin publish`` /
``get``), each one call of the broker's operations ``amqp.publish`` / ``amqp.get``
(``amqp/messageops.py``: the same code as ``oxiedge publish`` / ``oxiedge get``).

What is translated here is only RabbitMQ's spelling: the default exchange is
``amq.default``; a payload is ``string`` (UTF-8) or ``base64``; ``delivery_mode`` 2 makes a
message persistent (absent or 1: transient, as RabbitMQ); ``ackmode`` ``ack_requeue_true`` /
``reject_requeue_true`` put the messages back (redelivered), ``ack_requeue_false`` /
``reject_requeue_false`` remove them (oxiedge does not dead-letter the rejected ones);
``encoding`` ``auto`` answers a payload that is UTF-8 as a string, else base64; ``truncate``
cuts the payload served (``payload_bytes`` stays its size). The older API's ``requeue``
(true / false) is read as ``ack_requeue_true`` / ``ack_requeue_false`` when ``ackmode`` is
absent.
"""

from __future__ import annotations

import base64
from typing import Any

from .access import Need, Principal
from .messages import BadRequest, Request, Response, json_response
from .routes import BrokerView, Router
from .writes import body_object

VHOST = "/"
#: ``ackmode`` -> whether the messages are removed (acknowledged) rather than put back.
ACKMODES = {"ack_requeue_true": False, "reject_requeue_true": False,
            "ack_requeue_false": True, "reject_requeue_false": True}
ENCODINGS = ("auto", "base64")
PAYLOAD_ENCODINGS = ("string", "base64")
#: The most messages one ``get`` takes (``amqp.get``'s bound).
MAX_GET = 10_000


def _vhost(name: str) -> None:
    if name != VHOST:
        raise BadRequest(f"vhost {name!r} not found (oxiedge has one vhost, '/')", 404,
                         "Object Not Found")


def _refused(who: Principal, op: str, kind: str, name: str) -> BadRequest:
    return BadRequest(f"access to {kind} '{name}' in vhost '/' refused for user "
                      f"'{who.name}' ({op})", 401, "not_authorised")


def _integer(body: dict[str, Any], key: str, default: int | None, low: int, high: int
             ) -> int | None:
    """An integer field, also spelled as a string of digits (rabbitmqadmin sends
    ``"count": "1"``)."""
    raw = body.get(key, default)
    if raw is None:
        return None
    if isinstance(raw, str) and raw.strip().isascii() and raw.strip().isdigit() and len(raw) <= 30:
        raw = int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise BadRequest(f"{key}: {str(raw)[:40]!r} is not an integer")
    if not low <= raw <= high:
        raise BadRequest(f"{key}: {raw} is not between {low} and {high}")
    return raw


def _choice(body: dict[str, Any], key: str, default: str | None, known: Any) -> str:
    raw = body.get(key, default)
    if raw is None:
        raise BadRequest(f"{key}: missing (one of {', '.join(known)})")
    if raw not in known:
        raise BadRequest(f"{key}: {str(raw)[:40]!r} is not one of {', '.join(known)}")
    return str(raw)


def publish_args(exchange: str, body: dict[str, Any]) -> dict[str, Any]:
    """``amqp.publish``'s arguments from RabbitMQ's publish body."""
    key = body.get("routing_key")
    if not isinstance(key, str):
        raise BadRequest("routing_key: missing or not a string")
    payload = body.get("payload")
    if not isinstance(payload, str):
        raise BadRequest("payload: missing or not a string")
    encoding = _choice(body, "payload_encoding", "string", PAYLOAD_ENCODINGS)
    if encoding == "string":
        data = payload.encode()
    else:
        try:
            data = base64.b64decode(payload, validate=True)
        except ValueError:
            raise BadRequest("payload: not base64 (payload_encoding is base64)") from None
    properties = body.get("properties", {})
    if not isinstance(properties, dict):
        raise BadRequest("properties: must be a JSON object")
    properties = dict(properties)
    mode = properties.pop("delivery_mode", None)
    if isinstance(mode, str) and mode.isascii() and mode.isdigit() and len(mode) <= 3:
        mode = int(mode)
    if mode not in (None, 1, 2):
        raise BadRequest(f"properties.delivery_mode: {str(mode)[:20]!r} is not 1 or 2")
    return {"exchange": "" if exchange == "amq.default" else exchange, "routing_key": key,
            "payload": base64.b64encode(data).decode(), "persistent": mode == 2,
            "properties": properties}


def got_json(row: dict[str, Any], encoding: str, truncate: int | None) -> dict[str, Any]:
    """One message of ``amqp.get`` in RabbitMQ's shape."""
    data = base64.b64decode(row["payload"])
    if truncate is not None:
        data = data[:truncate]
    text: str | None = None
    if encoding == "auto":
        try:
            text = data.decode()
        except UnicodeDecodeError:
            text = None
    payload = text if text is not None else base64.b64encode(data).decode()
    return {"payload_bytes": row["bytes"], "redelivered": row["redelivered"],
            "exchange": row["exchange"], "routing_key": row["routing_key"],
            "message_count": row["message_count"], "properties": row["properties"],
            "payload": payload, "payload_encoding": "string" if text is not None else "base64"}


def message_routes(router: Router, broker: BrokerView) -> None:
    """``publish`` and ``get``: the administrator tag, and as in RabbitMQ ``write`` on the
    exchange to publish, ``read`` on the queue to get."""

    async def publish(req: Request, who: Principal, args: tuple[str, ...]) -> Response:
        _vhost(args[0])
        call = publish_args(args[1], body_object(req))
        if not broker.may(who, "write", args[1]):
            raise _refused(who, "write", "exchange", args[1])
        done = await broker.operate("amqp.publish", call)
        return json_response({"routed": bool(done.get("routed"))})

    async def get(req: Request, who: Principal, args: tuple[str, ...]) -> Response:
        _vhost(args[0])
        body = body_object(req)
        count = _integer(body, "count", 1, 1, MAX_GET)
        if "ackmode" not in body and isinstance(body.get("requeue"), bool):
            body["ackmode"] = "ack_requeue_true" if body["requeue"] else "ack_requeue_false"
        remove = ACKMODES[_choice(body, "ackmode", None, tuple(ACKMODES))]
        encoding = _choice(body, "encoding", "auto", ENCODINGS)
        truncate = _integer(body, "truncate", None, 0, 1 << 62)
        if not broker.may(who, "read", args[1]):
            raise _refused(who, "read", "queue", args[1])
        rows = await broker.operate("amqp.get", {"queue": args[1], "count": count,
                                                 "ack": remove})
        return json_response([got_json(r, encoding, truncate) for r in rows])

    router.add("POST", "/api/exchanges/*/*/publish", Need.ADMIN, publish)
    router.add("POST", "/api/queues/*/*/get", Need.ADMIN, get)

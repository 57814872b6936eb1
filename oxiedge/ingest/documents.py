"""Documents: what an MQTT payload becomes when a route ingests it (README "Ingest documents").

A JSON-object payload is the document; any other payload becomes ``{"payload": value}`` —
the JSON value, else the UTF-8 text, else base64 with ``"_payload_encoding": "base64"``.
Every document gets ``_topic`` and ``_received_at`` (ms); a publish with MQTT 5 properties
(an MQTT 5 publisher's, or an AMQP publisher's as ``bridge/props.py`` maps them) also gets
``_props``: ``content_type`` and ``user_properties`` (``[name, value]`` pairs in order,
duplicates kept), each only when present.

PUBACK means the document is stored: a document the store's encoder refuses (JSON nested
deeper than it writes, a string it cannot hold) is stored instead in its *fallback* form,
the payload as text (or base64) with ``_ingest_fallback`` saying why. The fallback is built
from strings only, so the encoder always takes it.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from ..staged import MessageProps


def props_field(props: MessageProps | None) -> dict[str, Any] | None:
    """The ``_props`` of a publish with ``props`` (None: nothing to record)."""
    if props is None or (props.content_type is None and not props.user_properties):
        return None
    out: dict[str, Any] = {}
    if props.content_type is not None:
        out["content_type"] = storable_text(props.content_type)
    if props.user_properties:
        out["user_properties"] = [[storable_text(k), storable_text(v)]
                                  for k, v in props.user_properties]
    return out


def payload_document(topic: str, payload: bytes, received_ms: int) -> dict[str, Any]:
    """The document an MQTT payload becomes (see the module docstring)."""
    doc: dict[str, Any]
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        doc = {"payload": base64.b64encode(payload).decode(), "_payload_encoding": "base64"}
    else:
        # orjson is strict where storage must be: NaN/Infinity and nesting deeper than 1024
        # are not storable JSON, so such payloads stay text. Integers beyond 64 bits become
        # floats, as in JavaScript.
        try:
            value = orjson.loads(payload) if text.strip() else text
        except orjson.JSONDecodeError:
            value = text
        if isinstance(value, dict):
            doc = value
            doc.pop("_id", None)
            doc.pop("_version", None)
        else:
            doc = {"payload": value}
    doc["_topic"] = topic
    doc["_received_at"] = received_ms
    return doc


def fallback_document(topic: str, payload: bytes, received_ms: int, reason: str
                      ) -> dict[str, Any]:
    """The document stored when ``payload_document``'s result cannot be encoded: the raw
    payload as text or base64, never a parsed value, so the encoder cannot refuse it."""
    doc: dict[str, Any]
    try:
        doc = {"payload": payload.decode("utf-8")}
    except UnicodeDecodeError:
        doc = {"payload": base64.b64encode(payload).decode(), "_payload_encoding": "base64"}
    doc["_topic"] = storable_text(topic)
    doc["_received_at"] = received_ms
    doc["_ingest_fallback"] = reason
    return doc


def storable_text(text: str) -> str:
    """``text`` with what strict UTF-8 cannot hold (lone surrogates) replaced by ``?``."""
    return text.encode("utf-8", "replace").decode("utf-8")


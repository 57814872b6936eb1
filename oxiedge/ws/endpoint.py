"""MQTT over WebSocket on the HTTP listener: an accepted upgrade becomes an MQTT connection.

The HTTP connection (``oxiedge.http.connection``) asks :meth:`WebSocketEndpoint.decide`
about a request to one of :data:`~oxiedge.ws.handshake.PATHS`, writes the ``101`` or the
refusal, and on a ``101`` hands its stream to :meth:`WebSocketEndpoint.serve`. From there
the connection is the MQTT service's like any TCP one (``mqtt.connection.Connection`` on
``net.loop.Transport``): the same protocol object, bounds, permissions, commit rounds and
durability. It stays inside the HTTP listener's connection guard, so the connection limits
(total and per source) count it and the login throttle sees its source address.

wsproto is imported by :meth:`serve` (``stream.py``), at the first upgrade.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from ..mqtt.connection import Connection, ConnectionHost
from ..tls import peer_name
from .handshake import PATHS, SUBPROTOCOLS, Accept, Refusal, decide

COUNTER_NAMES = ("upgrades", "refused", "pings", "closed_by_peer", "closed_text_frame",
                 "closed_message_too_big", "closed_protocol_error")


class WebSocketEndpoint:
    """``/mqtt`` and ``/ws`` on the HTTP listener, served by the MQTT service ``mqtt``."""

    paths = PATHS

    def __init__(self, mqtt: ConnectionHost, log: logging.Logger) -> None:
        self.mqtt = mqtt
        self.log = log
        self.counters = dict.fromkeys(COUNTER_NAMES, 0)
        self.open = 0

    def decide(self, method: str, headers: dict[str, str]) -> Accept | Refusal:
        """The handshake's answer to an upgrade request (``handshake.decide``), counted."""
        answer = decide(method, headers)
        self.counters["refused" if isinstance(answer, Refusal) else "upgrades"] += 1
        return answer

    async def serve(self, stream: trio.abc.Stream, trailing: bytes,
                    tls_identity: str | None = None) -> None:
        """Run MQTT over the WebSocket on ``stream`` (the ``101`` is sent) until it ends."""
        from .stream import WebSocketStream  # wsproto loads here, at the first upgrade

        ws = WebSocketStream(stream, max_message=self.mqtt.max_packet_size,
                             trailing=trailing, counters=self.counters)
        conn = Connection(self.mqtt, ws, tls_identity, peer_name(stream), frame=ws.frame)
        self.open += 1
        try:
            await conn.serve()
        except Exception as exc:  # a bug in one connection must not end the listener
            self.log.exception("MQTT over WebSocket: connection %s failed: %s",
                               conn.client_id, exc)
        finally:
            self.open -= 1

    def status(self) -> dict[str, Any]:
        return {"open": self.open, **self.counters, "paths": sorted(PATHS),
                "subprotocols": list(SUBPROTOCOLS),
                "max_message_bytes": self.mqtt.max_packet_size}

"""One MQTT client connection: ``MqttProtocol`` (sans-IO) on a ``net.Transport``.

The binding only: the protocol (``protocol.py``) decides everything, the transport loop
(``oxiedge.net.loop``) owns the stream, the commit, the writer and the deadlines. When the
connection ends, one log line says why if the broker ended it (a protocol error, the
keep-alive, a session take-over, no CONNECT in time), as AMQP's connections do and as an
operator coming from Mosquitto expects; ordinary ends (DISCONNECT, the client's socket
closing) are logged at debug level only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import trio

from oxiedge.app import App
from oxiedge.lograte import clip, suppressed_note
from oxiedge.mqtt.broker import Broker
from oxiedge.mqtt.protocol import MqttProtocol
from oxiedge.mqtt.session import Limits
from oxiedge.net.loop import Transport
from oxiedge.net.output import Traffic

__all__ = ["Connection", "ConnectionHost", "Traffic"]


class ConnectionHost(Protocol):
    """What a connection needs of its service (``MqttService``), named here so the
    binding does not import the service that imports it."""

    app: App
    broker: Broker
    limits: Limits
    max_packet_size: int
    max_connect_size: int
    connect_timeout: float
    traffic: Traffic  # the service's byte counters ($SYS/broker/bytes/*)

    async def authenticate(self, username: str | None, password: bytes | None) -> bool: ...


class Connection:
    """A client connection: a transport serving an ``MqttProtocol``."""

    def __init__(self, service: ConnectionHost, stream: trio.abc.Stream,
                 tls_identity: str | None = None, peer: str = "?",
                 frame: Callable[[bytes], bytes] | None = None) -> None:
        app = service.app
        self.log = app.log
        self.close_lines = app.close_lines
        self.peer = peer
        # A client that publishes but does not read would grow our output (its PUBACKs)
        # without bound: above this many buffered bytes the reader stops reading.
        # ``frame``: WebSocket framing of every send (``oxiedge.ws``), None over TCP/TLS.
        self.transport = Transport(stream, app.store, pause_at=4 * service.limits.out_limit,
                                   authenticate=service.authenticate,
                                   blocked=app.blocked, frame=frame,
                                   traffic=service.traffic)  # fmt: skip
        self.protocol = MqttProtocol(
            service.broker,
            self.transport.output,
            max_packet_size=service.max_packet_size,
            max_connect_size=service.max_connect_size,
            connect_timeout=service.connect_timeout,
            perms=app.permissions,
            alarms=app.alarms,
            log=app.log,
            clock=trio.lowlevel.current_clock().current_time,  # (= trio.current_time)
            tls_identity=tls_identity,
        )

    @property
    def client_id(self) -> str:
        return self.protocol.client_id

    async def serve(self) -> None:
        """Run the connection until it ends; never raises for network/protocol errors."""
        try:
            await self.transport.run(self.protocol)
        finally:
            self._report()

    def _report(self) -> None:
        proto = self.protocol
        reason = proto.close_reason
        if not reason:
            return
        if not proto.ended_by_broker:
            self.log.debug("MQTT %s (client %s, user %s): connection closed: %s", self.peer,
                           clip(proto.client_id), clip(proto.username),
                           clip(reason, 300, quote=False))
            return
        held = self.close_lines.take()
        if held is not None:
            self.log.info("MQTT %s (client %s, user %s): connection closed: %s%s", self.peer,
                          clip(proto.client_id), clip(proto.username),
                          clip(reason, 300, quote=False), suppressed_note(held))

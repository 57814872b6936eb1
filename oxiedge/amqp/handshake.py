"""The connection handshake (spec 4.2.3, the connection class): protocol header, start /
start-ok, tune / tune-ok, open / open-ok; and the SASL credentials of start-ok.

PLAIN and AMQPLAIN are decoded here without I/O; checking the password (hashing,
throttling) is the driver's job (``oxiedge.login``, off the event loop), asked for with
:class:`~oxiedge.amqp.actions.Authenticate`.  EXTERNAL (RabbitMQ's
rabbitmq_auth_mechanism_ssl) takes the verified client certificate's identity instead.
A client may send connection.close instead of any handshake reply: it gets close-ok.

:class:`Handshake` owns the dialogue's state; the connection (:class:`HandshakeHost`) lends
it output, reads and the login's answer.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

from oxiedge.access.grants import Grants
from oxiedge.amqp import spec
from oxiedge.amqp.actions import Authenticate, Steps
from oxiedge.amqp.client_properties import bounded_client_properties
from oxiedge.amqp.codec import HEARTBEAT, Command, FrameParser, encode_method
from oxiedge.amqp.constants import ACCESS_REFUSED, COMMAND_INVALID, NOT_ALLOWED
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.fields import decode_table, encode_longstr

if TYPE_CHECKING:
    from collections.abc import Generator

    from oxiedge.access.rules import PermissionStore
    from oxiedge.amqp.ports import ConnectionLimits

CLOSE_OK_FRAME = encode_method(0, spec.ConnectionCloseOk())


def decode_credentials(mechanism: str, response: bytes) -> tuple[str, bytes | None] | None:
    """``(user name, password)`` from a PLAIN or AMQPLAIN response; None when the
    mechanism is unknown or the response malformed (the login is refused)."""
    if mechanism == "PLAIN":
        # RFC 4616: [authzid] NUL authcid NUL passwd
        parts = response.split(b"\x00")
        if len(parts) != 3:
            return None
        return parts[1].decode("utf-8", "replace"), parts[2]
    if mechanism == "AMQPLAIN":
        # A field table without its length prefix: LOGIN and PASSWORD.
        try:
            table, _ = decode_table(encode_longstr(response))
        except AmqpError:
            return None
        login, pw = table.get("LOGIN"), table.get("PASSWORD")
        if isinstance(login, bytes):
            login = login.decode("utf-8", "replace")
        if isinstance(pw, str):
            pw = pw.encode()
        if not isinstance(login, str) or not isinstance(pw, (bytes, type(None))):
            return None
        return login, pw
    return None


class HandshakeHost(Protocol):
    """What the handshake needs of its connection (``AmqpProtocol`` is the one there is)."""

    #: The transport loop's answer to the last :class:`Authenticate`.
    login_ok: bool

    def send(self, data: bytes) -> None:
        """Output a frame."""

    def read(self) -> Steps:
        """Wait for more input (ends the connection at its deadline)."""

    def check_deadline(self) -> None:
        """End the connection if its deadline passed (after a login check)."""


class Handshake:
    """One connection's opening dialogue, and what it settles: the user, the client's
    capabilities, the tuned frame size, channel count and heartbeat.

    :meth:`run` is a step of the connection's generator; the connection takes what it
    uses per frame from here once :meth:`run` returned True (``AmqpProtocol._opened``).
    """

    def __init__(self, host: HandshakeHost, parser: FrameParser, limits: ConnectionLimits,
                 server_properties: dict[str, Any], perms: PermissionStore,
                 counters: dict[str, int], *, until: float,
                 tls_identity: str | None = None) -> None:
        self._host = host
        self._parser = parser
        self._server_properties = server_properties
        self._perms = perms
        self._counters = counters
        #: A verified client certificate's name (--tls-identity-as-username): offers EXTERNAL.
        self.tls_identity = tls_identity
        self.timeout = limits.handshake_timeout
        self.until = until  # the handshake's deadline (the loop's clock)
        # Offered in connection.tune, then what tune-ok settled.
        self.frame_max = limits.frame_max
        self.channel_max = limits.channel_max
        self.heartbeat = limits.heartbeat
        self.user = ""
        self.client_id = ""  # of the client properties (permissions); the table is not kept
        #: A bounded copy of what management shows of the table (client_properties.py).
        self.client_properties: dict[str, Any] = {}
        self.grants: Grants | None = None
        self.cancel_notify = False
        self.blocked_notify = False  # client announced the connection.blocked capability

    def deadline(self, now: float) -> float:
        """When the next read must have arrived while the handshake runs."""
        heartbeat = self.heartbeat
        return min(now + 2 * heartbeat if heartbeat else math.inf, self.until)

    def _command(self) -> Generator[Any, Any, Command]:
        parser = self._parser
        while True:
            ev = parser.next_event()
            if ev is None:
                yield from self._host.read()
            elif ev is not HEARTBEAT:
                assert isinstance(ev, Command)
                return ev

    def _expect(self, cls: type[spec.Method]) -> Generator[Any, Any, Any]:
        """The next method, which must be ``cls``; None if the client closed instead (it
        got close-ok)."""
        cmd = yield from self._command()
        if cmd.channel != 0 or type(cmd.method) is not cls:
            if isinstance(cmd.method, spec.ConnectionClose):
                self._host.send(CLOSE_OK_FRAME)
                return None
            raise AmqpError(COMMAND_INVALID, f"expected {cls.NAME}, got {cmd.method.NAME}",
                            cmd.method.CLASS_ID, cmd.method.METHOD_ID)
        return cmd.method

    def run(self) -> Generator[Any, Any, bool]:
        """Header, start, tune, open: True once open-ok is sent; False if the client
        closed instead (close-ok is sent); raises :class:`AmqpError` on a refusal."""
        host, parser = self._host, self._parser
        while parser.awaiting_header:
            if parser.next_event() is None and parser.awaiting_header:
                yield from host.read()
        mechanisms = b"PLAIN AMQPLAIN EXTERNAL" if self.tls_identity else b"PLAIN AMQPLAIN"
        host.send(encode_method(0, spec.ConnectionStart(
            0, 9, self._server_properties, mechanisms, b"en_US")))
        start_ok = yield from self._expect(spec.ConnectionStartOk)
        if start_ok is None:
            return False
        # Only what is used is kept, not the table (which goes with this step, at
        # connection.open at the latest): a client's 64 KiB of client properties (the
        # pre-login frame bound) decode to ~1 MiB of objects (measured; 1000 connections
        # kept ~1 GiB). Management's copy is bounded to ~2 KiB.
        props = start_ok.client_properties
        caps = props.get("capabilities")
        self.cancel_notify = isinstance(caps, dict) and bool(caps.get("consumer_cancel_notify"))
        self.blocked_notify = isinstance(caps, dict) and bool(caps.get("connection.blocked"))
        client_id = props.get("client_id", "")
        self.client_id = client_id if isinstance(client_id, str) else ""
        self.client_properties = bounded_client_properties(props)
        ok = False
        if start_ok.mechanism == "EXTERNAL":
            # The certificate is the credential; the response (an authzid) is not used.
            if self.tls_identity:
                self.user, ok = self.tls_identity, True
        else:
            credentials = decode_credentials(start_ok.mechanism, start_ok.response)
            if credentials is not None:
                self.user, password = credentials
                # Hashing off the event loop, throttled after failures (oxiedge.login).
                yield Authenticate(self.user or None, password or None)
                host.check_deadline()
                ok = host.login_ok  # (the login check is bounded by the deadline too)
        if not ok:
            self._counters["auth_failures"] += 1
            raise AmqpError(ACCESS_REFUSED,
                            f"Login was refused using authentication mechanism "
                            f"{start_ok.mechanism}", 10, 11)
        host.send(encode_method(0, spec.ConnectionTune(
            self.channel_max, self.frame_max, self.heartbeat)))
        tune_ok = yield from self._expect(spec.ConnectionTuneOk)
        if tune_ok is None:
            return False
        if tune_ok.frame_max:
            if tune_ok.frame_max < spec.FRAME_MIN_SIZE:
                raise AmqpError(NOT_ALLOWED, f"frame_max {tune_ok.frame_max} below 4096", 10, 31)
            self.frame_max = min(self.frame_max, tune_ok.frame_max)
        if tune_ok.channel_max:
            self.channel_max = min(self.channel_max, tune_ok.channel_max)
        # (parser.frame_max was the pre-login bound until here)
        self.heartbeat = tune_ok.heartbeat  # the client's choice wins (spec connection.tune-ok)
        parser.frame_max = self.frame_max
        open_ = yield from self._expect(spec.ConnectionOpen)
        if open_ is None:
            return False
        if open_.virtual_host != "/":
            raise AmqpError(NOT_ALLOWED, f"vhost '{open_.virtual_host}' not found", 10, 40)
        perms = self._perms
        self.grants = Grants(perms, self.user or None, self.client_id, "/")
        if perms.active and not self.grants.vhost_allowed():
            perms.counters["amqp_access_refused"] += 1
            raise AmqpError(NOT_ALLOWED, f"access to vhost '/' refused for user '{self.user}'",
                            10, 40)
        host.send(encode_method(0, spec.ConnectionOpenOk()))
        return True

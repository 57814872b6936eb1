"""The connection handshake (spec 4.2.3, the connection class): protocol header, start /
start-ok, tune / tune-ok, open / open-ok; and the SASL credentials of start-ok.

PLAIN and AMQPLAIN are decoded here without I/O; checking the password (hashing,
throttling) is the driver's job (``oxiedge.login``, off the event loop), asked for with
:class:`~oxiedge.amqp.actions.Authenticate`.  EXTERNAL (RabbitMQ's
rabbitmq_auth_mechanism_ssl) takes the verified client certificate's identity instead.
A client may send connection.close instead of any handshake reply: it gets close-ok.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from oxiedge.access.grants import Grants
from oxiedge.amqp import spec
from oxiedge.amqp.actions import Authenticate, Steps
from oxiedge.amqp.codec import HEARTBEAT, Command, FrameParser, encode_method
from oxiedge.amqp.constants import ACCESS_REFUSED, COMMAND_INVALID, NOT_ALLOWED
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.fields import decode_table, encode_longstr

if TYPE_CHECKING:
    from collections.abc import Generator

    from oxiedge.access.rules import PermissionStore
    from oxiedge.alarms import ResourceAlarms

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


class Handshake:
    """The handshake steps; mixed into :class:`~oxiedge.amqp.protocol.AmqpProtocol`,
    which owns the attributes declared here."""

    parser: FrameParser
    send: Callable[[bytes], None]
    server_properties: dict[str, Any]
    tls_identity: str | None
    counters: dict[str, int]
    perms: PermissionStore
    alarms: ResourceAlarms | None
    unsubscribe_alarms: Callable[[], None] | None
    user: str
    client_id: str
    grants: Grants | None
    cancel_notify: bool
    blocked_notify: bool
    frame_max: int
    channel_max: int
    heartbeat: int
    opened: bool
    closed: bool
    clean: bool
    linger: bool
    read: Callable[[], Steps]
    _ok: bool
    on_opened: Callable[[], None]
    check_deadline: Callable[[], None]

    def _command(self) -> Generator[Any, Any, Command]:
        parser = self.parser
        while True:
            ev = parser.next_event()
            if ev is None:
                yield from self.read()
            elif ev is not HEARTBEAT:
                assert isinstance(ev, Command)
                return ev

    def _expect(self, cls: type[spec.Method]) -> Generator[Any, Any, Any]:
        cmd = yield from self._command()
        if cmd.channel != 0 or type(cmd.method) is not cls:
            if isinstance(cmd.method, spec.ConnectionClose):
                self.send(CLOSE_OK_FRAME)
                self.closed = self.clean = self.linger = True
                return None
            raise AmqpError(COMMAND_INVALID, f"expected {cls.NAME}, got {cmd.method.NAME}",
                            cmd.method.CLASS_ID, cmd.method.METHOD_ID)
        return cmd.method

    def _handshake(self) -> Steps:
        parser = self.parser
        while parser.awaiting_header:
            if parser.next_event() is None and parser.awaiting_header:
                yield from self.read()
        mechanisms = b"PLAIN AMQPLAIN EXTERNAL" if self.tls_identity else b"PLAIN AMQPLAIN"
        self.send(encode_method(0, spec.ConnectionStart(
            0, 9, self.server_properties, mechanisms, b"en_US")))
        start_ok = yield from self._expect(spec.ConnectionStartOk)
        if start_ok is None:
            return
        # Only what is used is kept, not the table (which goes with this step, at
        # connection.open at the latest): a client's 64 KiB of client properties (the
        # pre-login frame bound) decode to ~1 MiB of objects (measured; 1000 connections
        # kept ~1 GiB).
        props = start_ok.client_properties
        caps = props.get("capabilities")
        self.cancel_notify = isinstance(caps, dict) and bool(caps.get("consumer_cancel_notify"))
        self.blocked_notify = isinstance(caps, dict) and bool(caps.get("connection.blocked"))
        client_id = props.get("client_id", "")
        self.client_id = client_id if isinstance(client_id, str) else ""
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
                self.check_deadline()
                ok = self._ok  # (the login check is bounded by the deadline too)
        if not ok:
            self.counters["auth_failures"] += 1
            raise AmqpError(ACCESS_REFUSED,
                            f"Login was refused using authentication mechanism "
                            f"{start_ok.mechanism}", 10, 11)
        self.send(encode_method(0, spec.ConnectionTune(
            self.channel_max, self.frame_max, self.heartbeat)))
        tune_ok = yield from self._expect(spec.ConnectionTuneOk)
        if tune_ok is None:
            return
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
            return
        if open_.virtual_host != "/":
            raise AmqpError(NOT_ALLOWED, f"vhost '{open_.virtual_host}' not found", 10, 40)
        self.grants = Grants(self.perms, self.user or None, self.client_id, "/")
        if self.perms.active and not self.grants.vhost_allowed():
            self.perms.counters["amqp_access_refused"] += 1
            raise AmqpError(NOT_ALLOWED, f"access to vhost '/' refused for user '{self.user}'",
                            10, 40)
        self.send(encode_method(0, spec.ConnectionOpenOk()))
        self.opened = True
        self.on_opened()
        alarms = self.alarms
        if alarms is not None:
            self.unsubscribe_alarms = alarms.subscribe(self._on_alarm)
            if alarms.blocked:
                self._on_alarm(True, alarms.reason)

    def _on_alarm(self, blocked: bool, reason: str) -> None:
        """Resource alarm changed: tell clients that asked (RabbitMQ's connection.blocked)."""
        if not self.blocked_notify or self.closed:
            return
        if blocked:
            self.send(encode_method(0, spec.ConnectionBlocked(reason[:255])))
        else:
            self.send(encode_method(0, spec.ConnectionUnblocked()))

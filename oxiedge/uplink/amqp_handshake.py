"""The uplink's AMQP 0-9-1 *client* handshake, sans-IO: commands in, frames out.

Theory of operation
-------------------
The server side of the same handshake is ``oxiedge/amqp/handshake.py``; this is the other
end, as the uplink speaks it to an upstream RabbitMQ node. :class:`ClientHandshake` holds no
socket and no event loop: the link (``amqp_link.py``) writes :meth:`ClientHandshake.start`
(the protocol header), then hands it every command it parses (``amqp_client.UpstreamFrames``)
and writes what :meth:`ClientHandshake.receive` returns, until :attr:`ClientHandshake.done`.

Two answers come first (spec 4.2.3): Connection.Start → Start-Ok (SASL PLAIN, our client
properties and capabilities), Connection.Tune → Tune-Ok (heartbeat, frame-max, channels).
Everything after is a *plan* of synchronous requests, each sent once the reply of the one
before has arrived (the table below, built by :func:`setup_plan` from explicit values):

==============  ======================================  ==================================
channel         request                                 why
==============  ======================================  ==================================
0               connection.open                         the virtual host
1               channel.open, confirm.select            publishes and their confirms
1               exchange.declare (durable, topic)       unless it is an ``amq.*`` exchange
2 (``--in``)    channel.open                            commands, apart from channel 1
2               queue.delete                            no ``--in`` any more, but retired
                                                        filters: nobody reads that queue
2               queue.declare, queue.bind per filter,   the device's command queue and
                queue.unbind per retired filter,        its consumer
                basic.qos, basic.consume
==============  ======================================  ==================================

A Channel.Close on channel 2 while it is being set up refuses only the commands (a
permission, an inequivalent queue type): the handshake answers Close-Ok, records why in
:attr:`ClientHandshake.inbound_refused` and ends there, and forwarding goes on. Any other
command is not the handshake's (``receive`` returns ``None``): the link handles what may come
at any time (Connection.Close, Connection.Blocked, Channel.Flow) and fails on the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from oxiedge import __version__
from oxiedge.amqp import spec
from oxiedge.amqp.codec import PROTOCOL_HEADER, Command, encode_method
from oxiedge.uplink.amqp_client import (
    CHANNEL,
    FRAME_MAX,
    INBOUND_CHANNEL,
    UpstreamFailure,
    close_reason,
)


# ----------------------------------------------------------------- the two answers
def client_properties(connection_name: str) -> dict[str, Any]:
    """Connection.Start-Ok ``client-properties``.

    The capabilities tell RabbitMQ which of its extensions we understand: it then sends
    Basic.Nack, Connection.Blocked/Unblocked, Basic.Cancel for a deleted queue, and closes
    with 403 (instead of silently dropping the socket) when the login is refused."""
    return {
        "product": "oxiedge",
        "version": __version__,
        "platform": "Python/trio",
        "connection_name": connection_name,
        "capabilities": {
            "publisher_confirms": True,
            "connection.blocked": True,
            "consumer_cancel_notify": True,
            "basic.nack": True,
            "authentication_failure_close": True,
        },
    }


def start_ok(start: spec.ConnectionStart, username: str, password: str,
             connection_name: str) -> spec.ConnectionStartOk:
    """Answer Connection.Start with PLAIN credentials (spec 4.2.3; RFC 4616 response
    ``\\0user\\0password``)."""
    if (start.version_major, start.version_minor) != (0, 9):
        raise UpstreamFailure(f"upstream speaks AMQP {start.version_major}-"
                              f"{start.version_minor}, not 0-9-1")
    mechanisms = start.mechanisms.decode("utf-8", "replace").split()
    if "PLAIN" not in mechanisms:
        raise UpstreamFailure(f"upstream offers no PLAIN login (only {' '.join(mechanisms)})")
    response = b"\0" + username.encode() + b"\0" + password.encode()
    return spec.ConnectionStartOk(client_properties(connection_name), "PLAIN", response,
                                  "en_US")


def negotiate(ours: int, theirs: int) -> int:
    """Negotiate a limit where 0 means "none": the lower of two real limits, else the one
    that is set (what RabbitMQ's own clients do for heartbeat, frame-max and channel-max)."""
    if ours == 0 or theirs == 0:
        return max(ours, theirs)
    return min(ours, theirs)


def tune_ok(tune: spec.ConnectionTune, heartbeat: float,
            frame_max: int = FRAME_MAX) -> spec.ConnectionTuneOk:
    """Connection.Tune-Ok: heartbeat in whole seconds (ours rounded up), frame-max the
    smaller of both (never below the spec's 4096 minimum), two channels."""
    want_hb = max(0, math.ceil(heartbeat)) if heartbeat > 0 else 0
    hb = min(negotiate(want_hb, tune.heartbeat), 0xFFFF)
    fmax = max(negotiate(frame_max, tune.frame_max), spec.FRAME_MIN_SIZE)
    channels = negotiate(INBOUND_CHANNEL, tune.channel_max)
    return spec.ConnectionTuneOk(channels, fmax, hb)


# ----------------------------------------------------------------- the plan
@dataclass(frozen=True, slots=True)
class ClientSetup:
    """What the handshake says, as explicit values (the link derives them from its
    endpoint and options)."""

    username: str
    password: str
    connection_name: str
    vhost: str = "/"
    heartbeat: float = 30.0           # wanted, in seconds; 0: none
    exchange: str = "amq.topic"       # declared (durable topic) unless ``amq.*``
    queue: str = ""                   # the command queue (``--in``)
    queue_type: str = "quorum"        # quorum | classic
    bind_keys: tuple[str, ...] = ()   # the ``--in`` filters as binding keys
    unbind_keys: tuple[str, ...] = ()  # retired filters, unbound (idempotent upstream)
    prefetch: int = 256               # basic.qos of the command consumer


@dataclass(frozen=True, slots=True)
class Rpc:
    """One synchronous request of the plan and the reply that completes it."""

    channel: int
    request: spec.Method
    reply: type[spec.Method]


def setup_plan(setup: ClientSetup) -> list[Rpc]:
    """The requests after Tune-Ok, in order (the module docstring's table)."""
    plan = [Rpc(0, spec.ConnectionOpen(setup.vhost), spec.ConnectionOpenOk),
            Rpc(CHANNEL, spec.ChannelOpen(), spec.ChannelOpenOk),
            Rpc(CHANNEL, spec.ConfirmSelect(), spec.ConfirmSelectOk)]
    if setup.exchange and not setup.exchange.startswith("amq."):
        plan.append(Rpc(CHANNEL, spec.ExchangeDeclare(0, setup.exchange, "topic",
                                                      durable=True, arguments={}),
                        spec.ExchangeDeclareOk))
    if not setup.bind_keys and not setup.unbind_keys:
        return plan
    inbound = INBOUND_CHANNEL
    plan.append(Rpc(inbound, spec.ChannelOpen(), spec.ChannelOpenOk))
    if not setup.bind_keys:
        # No --in any more: the device's command queue would fill for nobody.
        plan.append(Rpc(inbound, spec.QueueDelete(0, setup.queue), spec.QueueDeleteOk))
        return plan
    args = {} if setup.queue_type == "classic" else {"x-queue-type": setup.queue_type}
    plan.append(Rpc(inbound, spec.QueueDeclare(0, setup.queue, durable=True, arguments=args),
                    spec.QueueDeclareOk))
    plan.extend(Rpc(inbound, spec.QueueBind(0, setup.queue, setup.exchange, key,
                                            arguments={}), spec.QueueBindOk)
                for key in setup.bind_keys)
    plan.extend(Rpc(inbound, spec.QueueUnbind(0, setup.queue, setup.exchange, key,
                                              arguments={}), spec.QueueUnbindOk)
                for key in setup.unbind_keys)
    plan.append(Rpc(inbound, spec.BasicQos(0, max(1, min(setup.prefetch, 0xFFFF))),
                    spec.BasicQosOk))
    plan.append(Rpc(inbound, spec.BasicConsume(0, setup.queue, "", no_ack=False,
                                               arguments={}), spec.BasicConsumeOk))
    return plan


# ----------------------------------------------------------------- the machine
#: Where the handshake stands before its plan: waiting for connection.start, then tune.
_START, _TUNE = -2, -1


class ClientHandshake:
    """One connection's client handshake (module docstring). Its state is ``_step``:
    ``_START``, ``_TUNE``, then the index of the plan's request whose reply it awaits;
    ``len(plan)`` is done."""

    def __init__(self, setup: ClientSetup) -> None:
        self.setup = setup
        self._plan = setup_plan(setup)
        self._step = _START
        #: Negotiated by Tune / Tune-Ok (0 heartbeat: none).
        self.heartbeat = 0
        self.frame_max = FRAME_MAX
        self.server_properties: dict[str, Any] = {}
        #: Why the upstream refused the command channel, if it did.
        self.inbound_refused: str | None = None

    def start(self) -> bytes:
        """The first bytes to send: the protocol header (spec 4.2.2)."""
        return PROTOCOL_HEADER

    @property
    def done(self) -> bool:
        return self._step >= len(self._plan)

    @property
    def waiting_for(self) -> str:
        """The name of the method the handshake waits for ("" once done)."""
        if self._step == _START:
            return spec.ConnectionStart.NAME
        if self._step == _TUNE:
            return spec.ConnectionTune.NAME
        return "" if self.done else self._plan[self._step].reply.NAME

    def eof_reason(self) -> str | None:
        """What the upstream closing the TCP connection now means, if more than that."""
        if self._step == _START:
            return ("connection closed by upstream before connection.start "
                    "(not an AMQP 0-9-1 server?)")
        if self._step == _TUNE:  # a broker that drops a refused login without a close
            return (f"access refused: connection closed after login as "
                    f"{self.setup.username!r}")
        return None

    def receive(self, cmd: Command) -> bytes | None:
        """Advance on one command from the upstream: the frames to send next (``b""``:
        nothing, the handshake is done), or ``None`` if the command is not part of the
        handshake (the caller's to handle). Raises :class:`UpstreamFailure` when the
        upstream cannot be spoken to (no connection.start, no 0-9-1, no PLAIN)."""
        m = cmd.method
        if self._step == _START:
            if not isinstance(m, spec.ConnectionStart):
                raise UpstreamFailure(f"expected connection.start, got {m.NAME}")
            setup = self.setup
            answer = start_ok(m, setup.username, setup.password, setup.connection_name)
            self.server_properties = m.server_properties
            self._step = _TUNE
            return encode_method(0, answer)
        if self._step == _TUNE:
            if not isinstance(m, spec.ConnectionTune) or cmd.channel != 0:
                return None
            ok = tune_ok(m, self.setup.heartbeat)
            self.heartbeat, self.frame_max = ok.heartbeat, ok.frame_max
            self._step = 0
            return encode_method(0, ok) + self._request()
        if self.done:
            return None
        rpc = self._plan[self._step]
        if isinstance(m, rpc.reply) and cmd.channel == rpc.channel:
            self._step += 1
            return self._request()
        if isinstance(m, spec.ChannelClose) and cmd.channel == rpc.channel == INBOUND_CHANNEL:
            # The commands are refused; forwarding goes on (the next connection retries).
            self.inbound_refused = close_reason(m)
            self._step = len(self._plan)
            return encode_method(INBOUND_CHANNEL, spec.ChannelCloseOk())
        return None

    def _request(self) -> bytes:
        if self.done:
            return b""
        rpc = self._plan[self._step]
        return encode_method(rpc.channel, rpc.request)

    def summary(self) -> str:
        """A short line for ``io.up``: the server's product and version, what was
        negotiated, and whether the commands are unavailable."""
        product = _text(self.server_properties.get("product", "?"))
        version = _text(self.server_properties.get("version", "?"))
        note = ""
        if self.inbound_refused is not None:
            note = f"; commands (--in) unavailable: {self.inbound_refused}"
        return (f"{product} {version}, heartbeat {self.heartbeat} s, frame_max "
                f"{self.frame_max}{note}")


def _text(value: object) -> object:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value

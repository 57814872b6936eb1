"""What one uplink connection (a *link*) gets from the uplink manager, and gives back.

An uplink forwards local messages to an upstream broker (RabbitMQ over AMQP 0-9-1, or any
MQTT 3.1.1 broker) and brings commands back. The manager (``manager.py``) owns the durable
outbox, the in-flight window, reconnects and back-off; a *link* is one connection attempt to
one upstream node and knows only its protocol:

``run_amqp_link(endpoint, options, io)`` / ``run_mqtt_link(endpoint, options, io)``
    Connect (TLS when the scheme ends in ``s``), handshake, call ``io.up()``, then until the
    connection fails: send what ``await io.take(n)`` hands out, call ``io.confirmed(seq)``
    when the upstream confirms exactly that message (AMQP publisher confirm / MQTT PUBACK),
    ``io.returned(seq, why)`` when it gave the message back instead (AMQP Basic.Return),
    ``io.park(seq, why)`` for a message it cannot express upstream (never sent),
    and for inbound commands ``await io.deliver(topic, payload)`` (returns once the message
    is durable locally) *before* acknowledging it upstream. A dead peer (no heartbeat /
    PINGRESP within the bound) or any failure raises ``LinkError`` with a one-line reason;
    the function never returns normally. Cancellation closes the socket.

Names: a local topic ``T`` is ``prefix + T`` upstream; for AMQP that topic becomes the
routing key with ``/`` → ``.`` (``upstream_name``). Inbound names are translated back and the
prefix stripped (``local_topic``). Topics that cannot be translated are never staged.
"""

from __future__ import annotations

import hashlib
import ssl
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import unquote, urlsplit

from ..errors import ConfigError
from ..staged import MessageProps
from ..topicmap import mqtt_to_routing_key, routing_key_to_mqtt

SCHEMES = {"amqp": 5672, "amqps": 5671, "mqtt": 1883, "mqtts": 8883}


class UplinkError(ConfigError):
    """A bad uplink definition (URL, filter, option); the message names it."""


class LinkError(Exception):
    """The connection to the upstream node failed or died; the message says why."""


class PublishRefused(LinkError):
    """The upstream refused one of our publishes by closing the channel (e.g. 403: no
    write permission on that routing key, 406: message too large). ``unconfirmed`` are the
    seqs in flight then, in publish order: the refused one is among them, and when it is
    the only one, it is known exactly."""

    def __init__(self, reason: str, unconfirmed: list[int], code: int = 0) -> None:
        super().__init__(reason)
        self.unconfirmed = unconfirmed
        self.code = code  # the reply code: 403 refuses the routing key, others the message


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One upstream node, parsed from ``amqp[s]://user:pass@host:port/vhost`` or
    ``mqtt[s]://user:pass@host:port``."""

    scheme: str
    host: str
    port: int
    username: str | None = None
    password: str | None = None
    vhost: str = "/"

    @property
    def protocol(self) -> str:
        """``amqp`` or ``mqtt``."""
        return self.scheme.rstrip("s")

    @property
    def tls(self) -> bool:
        return self.scheme.endswith("s")

    def redacted(self) -> str:
        """The URL with the password hidden (for logs, ``uplink list`` and status)."""
        user = ""
        if self.username is not None:
            user = self.username + (":***" if self.password is not None else "") + "@"
        host = f"[{self.host}]" if ":" in self.host else self.host
        path = ""
        if self.protocol == "amqp" and self.vhost != "/":
            path = "/" + self.vhost.replace("/", "%2F")
        return f"{self.scheme}://{user}{host}:{self.port}{path}"


def parse_endpoint(url: str) -> Endpoint:
    """Parse one upstream URL; raises ``UplinkError`` naming the URL (password hidden)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        # The parser's own text may quote part of the password (an unescaped / # ? in it
        # ends the host part early): say what is wrong without it.
        raise UplinkError(f"uplink URL {_hide(url)!r}: invalid host or port (percent-encode "
                          "/ # ? @ : in user names and passwords)") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise UplinkError(f"uplink URL {_hide(url)!r}: scheme must be one of "
                          f"{', '.join(sorted(SCHEMES))}")
    if not parts.hostname:
        raise UplinkError(f"uplink URL {_hide(url)!r}: no host")
    vhost = "/"
    if parts.path not in ("", "/"):
        if scheme.startswith("mqtt"):
            raise UplinkError(f"uplink URL {_hide(url)!r}: an MQTT URL has no path")
        vhost = unquote(parts.path[1:])  # amqp://h/%2F is the vhost "/" (RabbitMQ's rule)
    return Endpoint(scheme, parts.hostname, port or SCHEMES[scheme],
                    unquote(parts.username) if parts.username is not None else None,
                    unquote(parts.password) if parts.password is not None else None, vhost)


def _hide(url: str) -> str:
    """``url`` with everything between ``://`` and the LAST ``@`` reduced to the user name
    and ``***`` (never show a secret, even one with unescaped / # ? @ in it)."""
    head, sep, rest = url.strip().partition("://")
    if not sep or "@" not in rest:
        return url
    cred, _, tail = rest.rpartition("@")
    user = cred.split(":", 1)[0].split("/", 1)[0]
    return f"{head}://{user}:***@{tail}"


@dataclass(frozen=True, slots=True)
class LinkOptions:
    """Per-uplink settings a link needs (the manager fills them from the definition)."""

    name: str
    device_id: str
    prefix: str = ""                  # upstream topic prefix, e.g. "site/dev1/"
    exchange: str = "amq.topic"       # AMQP: where outbound messages go, inbound queue binds
    inbound: tuple[str, ...] = ()     # --in filters, MQTT syntax, relative to the prefix
    window: int = 256                 # most unconfirmed outbound messages
    heartbeat: float = 30.0           # AMQP heartbeat / MQTT keep-alive, seconds
    connect_timeout: float = 10.0     # TCP + TLS + protocol handshake
    ca_file: str | None = None        # TLS: trust these CAs instead of the system's
    queue_type: str = "quorum"        # AMQP inbound queue: quorum | classic
    retired: tuple[str, ...] = ()     # upstream filters (MQTT syntax) to unbind/unsubscribe

    @property
    def client_id(self) -> str:
        """MQTT client id upstream (persistent session: commands wait while offline)."""
        full = f"oxiedge-{self.device_id}-{self.name}"
        if len(full) <= 64:
            return full
        # Cut, but keep distinct uplinks distinct: a short hash of the whole id.
        return f"{full[:55]}-{hashlib.sha1(full.encode()).hexdigest()[:8]}"

    @property
    def queue(self) -> str:
        """AMQP inbound queue name upstream (durable, one per device and uplink)."""
        return f"oxiedge.{self.device_id}.{self.name}"


@dataclass(slots=True)
class OutMessage:
    """One outbox entry handed to a link: ``seq`` identifies it in ``io.confirmed``."""

    seq: int
    topic: str        # the LOCAL topic; the link applies ``upstream_name``
    payload: bytes
    enqueued_ms: int = 0   # when it was published here (ms since the epoch)
    retain: bool = False   # MQTT: published with RETAIN here (kept upstream too)
    props: MessageProps | None = None  # its properties (MQTT 5 upstream, AMQP mapping)
    size: int = 0          # what it counts in the outbox's bytes: its record's length


class LinkIO(Protocol):
    """The manager's side of one connection (see the module docstring)."""

    async def take(self, limit: int) -> list[OutMessage]:
        """Wait until a message may be sent (outbox not empty, window not full); return
        1..``limit`` messages in outbox order. The window is counted by the manager."""

    def confirmed(self, seq: int) -> None:
        """The upstream confirmed ``seq``: the manager deletes it from the outbox."""

    async def deliver(self, topic: str, payload: bytes, props: MessageProps | None = None) -> None:
        """Publish an inbound message (with its MQTT 5 ``props``) locally at QoS 1 under the
        LOCAL ``topic``; returns once it is on disk. Raises ``LinkError`` if it cannot be
        published (bad topic)."""

    def up(self, endpoint: Endpoint, detail: str = "") -> None:
        """The handshake with ``endpoint`` completed (state → connected)."""

    def returned(self, seq: int, reason: str) -> None:
        """The upstream gave ``seq`` back (AMQP Basic.Return: nothing there takes its routing
        key) and then acked it: it is NOT taken. The manager keeps it in the outbox and
        retries it with back-off; ``reason`` names the routing key and the reply."""

    def park(self, seq: int, reason: str) -> None:
        """``seq`` cannot be sent as the uplink is defined (no upstream name for its topic):
        the manager keeps it in the outbox, not sent, counted in ``parked``."""


# ------------------------------------------------------------------- names
def upstream_name(protocol: str, prefix: str, topic: str) -> str | None:
    """The upstream name of local ``topic``: MQTT topic ``prefix+topic``, or for AMQP that
    topic as a routing key (``/`` → ``.``). ``None`` if it cannot be expressed."""
    name = prefix + topic
    if protocol == "amqp":
        return mqtt_to_routing_key(name)
    return name if len(name.encode()) <= 65535 else None


def upstream_filter(protocol: str, prefix: str, topic_filter: str) -> str:
    """An ``--in`` filter as the upstream sees it: MQTT ``prefix+filter``; AMQP a topic
    binding key (``+`` → ``*``, ``#`` stays, ``/`` → ``.``)."""
    name = prefix + topic_filter
    if protocol == "amqp":
        return ".".join("*" if level == "+" else level for level in name.split("/"))
    return name


def local_topic(protocol: str, prefix: str, name: str) -> str | None:
    """The local topic of an inbound upstream name (routing key or topic), prefix stripped;
    ``None`` if it cannot be translated or lies outside the prefix."""
    topic = routing_key_to_mqtt(name) if protocol == "amqp" else name
    if topic is None or not topic.startswith(prefix):
        return None
    topic = topic[len(prefix):]
    return topic or None


def tls_context(endpoint: Endpoint, ca_file: str | None) -> ssl.SSLContext:
    """Certificate-verifying client context (hostname checked); ``ca_file`` replaces the
    system trust store when given."""
    ctx = ssl.create_default_context(cafile=ca_file) if ca_file else \
        ssl.create_default_context()
    ctx.check_hostname = True
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx

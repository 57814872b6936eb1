"""What differs in an MQTT 5 CONNECT (3.1, 3.2), sans-IO: the pieces ``ConnectStep`` uses
when the protocol level is 5.

- ``Connect5Terms``: what the client asked for and the broker grants - the Session Expiry
  Interval (capped by ``--mqtt-session-expiry``; 0 ends the session with the connection),
  the client's Receive Maximum and Maximum Packet Size (they bound what the broker sends
  it), and the CONNACK properties that announce what this broker does (3.2.2.3): its
  Receive Maximum, Maximum Packet Size and Topic Alias Maximum, an Assigned Client
  Identifier for an empty one, and that Shared Subscriptions are available.
  Retain, QoS 2, wildcards and Subscription Identifiers are available: their properties
  are left out, which means exactly that.
- ``refusal``: the MQTT 5 reason code of a refused CONNECT, from the 3.1.1 one.
- ``response_information``: what a client that sets Request Response Information gets
  (3.1.2.11.6, 3.2.2.3.15): the topic prefix ``reply/CLIENT-ID/`` for the Response Topics
  of its requests, when it may subscribe to ``reply/CLIENT-ID/#``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from oxiedge.mqtt.packets import ConnackCode
from oxiedge.mqtt.packets5 import Connack5, Connect5
from oxiedge.mqtt.properties import Properties
from oxiedge.mqtt.reasons import ReasonCode as RC

#: Topic Aliases one MQTT 5 client may set towards the broker (per connection, 3.3.2.3.4).
TOPIC_ALIAS_MAXIMUM = 64
#: The Session Expiry Interval meaning "never expires" (3.1.2.11.2).
NEVER = 0xFFFFFFFF

_REFUSALS = {
    ConnackCode.UNACCEPTABLE_PROTOCOL_VERSION: RC.UNSUPPORTED_PROTOCOL_VERSION,
    ConnackCode.IDENTIFIER_REJECTED: RC.CLIENT_IDENTIFIER_NOT_VALID,
    ConnackCode.SERVER_UNAVAILABLE: RC.QUOTA_EXCEEDED,  # --mqtt-max-sessions
    ConnackCode.BAD_USERNAME_OR_PASSWORD: RC.BAD_USER_NAME_OR_PASSWORD,
    ConnackCode.NOT_AUTHORIZED: RC.NOT_AUTHORIZED,
}


#: The root of the Response Information prefix: ``reply/`` + client id + ``/``.
RESPONSE_ROOT = "reply/"


def response_information(client_id: str, may_subscribe: Callable[[str], bool]) -> str | None:
    """The Response Information for ``client_id``, or None (then none is sent, as
    3.1.2.11.6 allows): none for an id that is not one topic level (``/``, ``+``, ``#``,
    as ``%c`` in a pattern line) or whose client may not subscribe to ``PREFIX#`` under
    the read rules (a prefix it could not use)."""
    if not client_id or "/" in client_id or "+" in client_id or "#" in client_id:
        return None
    prefix = f"{RESPONSE_ROOT}{client_id}/"
    return prefix if may_subscribe(prefix + "#") else None


def refusal(code: int) -> int:
    """The MQTT 5 CONNACK reason for a 3.1.1 return code (3.2.2.2)."""
    return _REFUSALS[ConnackCode(code)]


@dataclass(frozen=True, slots=True)
class Connect5Terms:
    """The terms of one MQTT 5 connection (see the module docstring)."""

    session_expiry: int  # seconds; 0: the session ends with the connection
    capped: bool  # the broker granted less than asked: CONNACK says so (3.2.2.3.2)
    receive_maximum: int  # the client's: in-flight PUBLISHes to it at most
    max_packet: int  # the client's Maximum Packet Size
    topic_alias_maximum: int  # the client's: aliases the broker may use towards it
    keep_alive: int  # seconds, as granted
    server_keep_alive: bool  # lowered from the client's: CONNACK says so (3.2.2.3.14)
    problem_info: bool  # Request Problem Information (3.1.2.11.7): Reason Strings wanted
    response_info: bool  # Request Response Information 1 (3.1.2.11.6)

    @classmethod
    def of(cls, pkt: Connect5, cap: int | None, max_keepalive: int = 65535) -> Connect5Terms:
        """The terms of ``pkt`` under the broker's ``--mqtt-session-expiry`` (``cap``) and
        ``--mqtt-max-keepalive``: a longer keep-alive, or 0 (none) under a real bound, is
        lowered to it (MQTT-3.2.2-21: the client then uses the server's value)."""
        props = pkt.properties
        asked = props.session_expiry_interval or 0
        granted = asked
        if cap is not None and (asked == NEVER or asked > cap):
            granted = cap
        keep = pkt.keep_alive
        if keep > max_keepalive or (keep == 0 and max_keepalive < 65535):
            keep = max_keepalive
        return cls(
            session_expiry=granted,
            capped=granted != asked,
            receive_maximum=props.receive_maximum or 65535,
            max_packet=props.maximum_packet_size or (1 << 28),
            topic_alias_maximum=props.topic_alias_maximum or 0,
            keep_alive=keep,
            server_keep_alive=keep != pkt.keep_alive,
            problem_info=props.request_problem_information != 0,
            response_info=props.request_response_information == 1,
        )

    def connack(self, present: bool, *, assigned: str | None, receive_maximum: int,
                max_packet_size: int, response: str | None = None) -> Connack5:  # fmt: skip
        """The CONNACK that accepts the connection, announcing the broker's side
        (``response``: the Response Information, only if the client asked for it)."""
        props = Properties(
            session_expiry_interval=self.session_expiry if self.capped else None,
            assigned_client_identifier=assigned,
            receive_maximum=receive_maximum,
            topic_alias_maximum=TOPIC_ALIAS_MAXIMUM,
            maximum_packet_size=max_packet_size,
            shared_subscription_available=1,
            server_keep_alive=self.keep_alive if self.server_keep_alive else None,
            response_information=response if self.response_info else None,
        )
        return Connack5(0, present, props)

"""``oxiedge.net``: one transport loop for every protocol (MQTT and AMQP; a WebSocket stream next).

Two halves, split so the protocols never see trio or a socket:

``net.actions`` (no trio)
    The vocabulary between a sans-IO protocol object and the loop, and the
    ``StreamProtocol`` interface the loop drives.

``net.hot`` (trio internals)
    The hot loop: parked plain-TCP connections served inline in trio's I/O wait (an
    instrument), so a burst that needs no await costs no task wake-up.

``net.blocked`` (trio)
    A connection held by a resource alarm (``BLOCKED``): waits for the alarm to clear
    while it watches the socket, so a peer that hangs up or vanishes meanwhile ends the
    connection at once (its session, queues and will with it), with keep-alive probes
    (``--blocked-keepalive``) for a peer that went silent.

``net.loop`` (trio)
    ``Transport``: owns one ``trio.abc.Stream`` (TCP, ``trio.SSLStream`` for TLS, a
    WebSocket stream later), the reader and writer tasks, the end-of-burst commit,
    back-pressure, deadlines and the close.

How a protocol plugs in
-----------------------
::

    transport = Transport(stream, store, pause_at=4 * out_limit,
                          authenticate=logins.check, wait_unblocked=alarms.wait_unblocked)
    proto = MyProtocol(..., outlet=transport)      # sans-IO, no trio import
    transport.protocol = proto                     # who owns this transport (take-over)
    await transport.run(proto)                     # returns when the connection ended

The loop calls, on the protocol object (``StreamProtocol``):

- ``receive_data(data)`` with every read (``b""``: the peer closed its side), then
  ``next_action()`` until it returns ``NEED_DATA`` (or a ``Close``). Actions:

  ============== ===========================================================
  ``NEED_DATA``  send ``data_to_send()`` (one write, from the reading task when
                 nothing is buffered: the non-durable fast path), wait for input
                 until ``proto.deadline`` (``trio.current_time()`` based, ``inf``
                 for none), also while the output is over ``pause_at``; then
                 ``receive_data`` or ``timed_out()``
  ``SEND``       send ``data_to_send()`` now (order matters before what follows)
  ``COMMIT``     ``await store.commit()``; then ``commit_done(None | exc)``; if the
                 task is cancelled meanwhile ``commit_cancelled()`` (re-raised)
  ``KICK``       ``store.kick()`` (staged work nobody waits for)
  ``CHECKPOINT`` ``await trio.sleep(0)`` (a long burst lets others run)
  ``BLOCKED``    ``await wait_unblocked()`` (resource alarm; ``net.blocked`` ends
                 the wait if the peer goes), then ``unblocked()``
  ``Authenticate(user, password)``  ``await authenticate(...)`` (a thread), then
                 ``authenticated(ok)``
  ``Close(reason)``  stop reading; flush what was written (``CLOSE_FLUSH_TIMEOUT``)
  ============== ===========================================================

- ``on_sent()`` after each send of the writer (room in the buffer again: refill; return
  True to kick the committer), ``connection_lost(reason)`` when the stream broke,
  ``connection_closed()`` once at the very end (return True to kick).

The protocol writes anything that is not a burst reply (deliveries, re-sends,
heartbeats, a refusing CONNACK) with ``transport.write(data)`` (never blocks, keeps
order), reads ``transport.out_bytes`` (buffered + in transit) for its own bounds and
``transport.writable``; ``transport.abort()`` ends the connection from outside (a
session take-over); ``transport.writes`` (a count of writes) serves idle heartbeats.

A protocol is tested without a socket: feed bytes, step ``next_action()``, answer the
actions, compare ``data_to_send()`` and what it wrote to its outlet with exact bytes
(``tests/mqtt/test_protocol.py``).
"""

from __future__ import annotations

from oxiedge.net.actions import (
    BLOCKED,
    CHECKPOINT,
    COMMIT,
    KICK,
    NEED_DATA,
    SEND,
    Authenticate,
    Close,
    StreamProtocol,
)

__all__ = ["BLOCKED", "CHECKPOINT", "COMMIT", "KICK", "NEED_DATA", "SEND", "Authenticate",
           "Close", "StreamProtocol"]

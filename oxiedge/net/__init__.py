"""``oxiedge.net``: one transport loop for every protocol (MQTT and AMQP; TCP, TLS, WebSocket).

Two halves, split so the protocols never see trio or a socket:

``net.actions`` (no trio)
    The vocabulary between a sans-IO protocol object and the loop, and the
    ``StreamProtocol`` interface the loop drives.

``net.hot`` (trio internals)
    The hot loop: parked plain-TCP connections served inline in trio's I/O wait (an
    instrument), so a burst that needs no await costs no task wake-up. A connection and
    the loop share one ``Seat``; ``hot_loop_state()`` says whether the loop is on, or why not.

``net.blocked`` (trio)
    A connection held by a resource alarm (``BLOCKED``): waits for the alarm to clear
    while it watches the socket, so a peer that hangs up or vanishes meanwhile ends the
    connection at once (its session, queues and will with it), with keep-alive probes
    (``--blocked-keepalive``) for a peer that went silent. One ``BlockedWatch`` per
    server (its settings and counters), given to every transport.

``net.output`` (trio)
    ``Output``: one connection's output side, the one place every byte to the client
    passes: the buffer, the writer task, the direct sends, ``out_bytes`` for
    back-pressure, the byte counts (``Traffic``), and the framing hook (WebSocket).

``net.loop`` (trio)
    ``Transport``: owns one ``trio.abc.Stream`` (TCP, ``trio.SSLStream`` for TLS, a
    WebSocket stream: ``oxiedge.ws.stream``), the reader task, the end-of-burst commit,
    deadlines and the close; its ``output`` is an ``Output``.

``net.written``, ``net.sockets``
    The connections a running burst wrote to; the socket under a plain, TLS or WebSocket
    stream.

``net`` imports only ``net``, the standard library and trio: it knows no protocol, no
configuration and no process wiring (``tests/core/test_architecture.py``).

How a protocol plugs in
-----------------------
::

    transport = Transport(stream, store, pause_at=4 * out_limit,
                          authenticate=logins.check, blocked=app.blocked)  # a BlockedWatch
    proto = MyProtocol(..., outlet=transport.output)   # sans-IO, no trio import
    await transport.run(proto)   # (output.protocol = proto); returns when the connection ended

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
  ``BLOCKED``    ``await blocked.wait(stream)`` (resource alarm; ``net.blocked``
                 ends the wait if the peer goes), then ``unblocked()``
  ``Authenticate(user, password)``  ``await authenticate(...)`` (a thread), then
                 ``authenticated(ok)``
  ``Close(reason)``  stop reading; flush what was written (``CLOSE_FLUSH_TIMEOUT``)
  ============== ===========================================================

- ``on_sent()`` after each send of the writer (room in the buffer again: refill; return
  True to kick the committer), ``connection_lost(reason)`` when the stream broke,
  ``connection_closed()`` once at the very end (return True to kick).

The protocol writes anything that is not a burst reply (deliveries, re-sends,
heartbeats, a refusing CONNACK) with ``output.write(data)`` (never blocks, keeps
order), reads ``output.out_bytes`` (buffered + in transit) for its own bounds and
``output.writable``; ``output.abort()`` (or ``transport.abort()``) ends the connection
from outside (a session take-over); ``output.writes`` (a count of writes) serves idle
heartbeats; ``output.protocol`` is the protocol that owns the connection.

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

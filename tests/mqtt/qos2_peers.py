"""QoS 2 clients that behave as MQTT 3.1.1 asks of a client, for crash tests.

Both keep a persistent session (clean_session=0) and reconnect, forever, until told to
finish. After every reconnect they re-send what is unacknowledged with the original packet
identifiers, in the original order (MQTT-4.4.0-1). ``SpecPublisher`` is the QoS 2 sender of
4.3.3 (PUBLISH until PUBREC, then PUBREL until PUBCOMP; an identifier is reused only after
its PUBCOMP). ``SpecSubscriber`` is the receiver of 4.3.3 method B: it hands a message on
when it first sees its identifier, and treats any PUBLISH with an identifier it holds (PUBREC
sent, PUBREL not yet received) as a duplicate, not to be handed on (MQTT-4.3.3-2).

Payloads carry the message number (8 bytes, big-endian). The clients record: what was
published, what the broker PUBRECed, what was handed on (in order), re-sends recognised as
duplicates, and "swallowed" messages: a PUBLISH of a *different* message under an
identifier the subscriber still holds, which a receiver drops as a duplicate (a loss the
broker caused by reusing the identifier).
"""

from __future__ import annotations

import socket
import threading
import time

from oxiedge.mqtt.codec import Decoder, encode
from oxiedge.mqtt.packets import (
    Connack,
    Connect,
    Packet,
    Pingresp,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
)

IO_TIMEOUT = 5.0  # a silent server for this long is treated as gone: reconnect


class Endpoint:
    """The port of the server's current life (None while it is down)."""

    def __init__(self) -> None:
        self._port: int | None = None
        self._lock = threading.Lock()

    def set(self, port: int | None) -> None:
        with self._lock:
            self._port = port

    def get(self) -> int | None:
        with self._lock:
            return self._port


class _Peer(threading.Thread):
    """Connection loop shared by both clients."""

    def __init__(self, endpoint: Endpoint, client_id: str) -> None:
        super().__init__(daemon=True, name=client_id)
        self.endpoint = endpoint
        self.client_id = client_id
        self.done = threading.Event()  # set by the subclass when it finished its job
        self.error: BaseException | None = None
        self.connects = 0  # sessions opened (CONNACK received)
        self._established = False  # a CONNACK was received once: the session exists
        self._decoder = Decoder()

    def run(self) -> None:
        try:
            while not self.done.is_set():
                port = self.endpoint.get()
                if port is None:
                    time.sleep(0.02)
                    continue
                try:
                    sock = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT)
                except OSError:
                    time.sleep(0.02)
                    continue
                try:
                    self._decoder = Decoder()
                    sock.sendall(encode(Connect(self.client_id, False, 60)))
                    connack = self._next(sock)
                    # A persistent session, once CONNACKed, survives everything here.
                    assert connack == Connack(0, self._established), (self.client_id, connack)
                    self._established = True
                    self.connects += 1
                    self.session(sock)
                except (OSError, ConnectionError):
                    pass
                finally:
                    sock.close()
        except BaseException as exc:
            self.error = exc
            self.done.set()

    def session(self, sock: socket.socket) -> None:
        raise NotImplementedError

    def _packets(self, sock: socket.socket) -> list[Packet]:
        """At least one packet (blocking), plus whatever else is already here."""
        out = list(self._decoder)
        while not out:
            data = sock.recv(1 << 16)
            if not data:
                raise ConnectionError("closed by the server")
            self._decoder.feed(data)
            out = list(self._decoder)
        return out

    def _next(self, sock: socket.socket) -> Packet:
        p = self._decoder.next_packet()
        while p is None:
            data = sock.recv(1 << 16)
            if not data:
                raise ConnectionError("closed by the server")
            self._decoder.feed(data)
            p = self._decoder.next_packet()
        return p


class SpecPublisher(_Peer):
    """Publishes numbered QoS 2 messages with up to ``window`` flows open, until
    ``finish()``; then completes every open flow and disconnects."""

    def __init__(self, endpoint: Endpoint, client_id: str, topic: str, first_no: int = 1,
                 window: int = 64, size: int = 64) -> None:  # fmt: skip
        super().__init__(endpoint, client_id)
        self.topic = topic
        self.window = window
        self.filler = b"." * max(0, size - 8)
        # packet id -> [state, message number]; in the order the pending packet was sent:
        # "pub" = PUBLISH sent, PUBREC awaited; "rel" = PUBREL sent, PUBCOMP awaited.
        self.open: dict[int, tuple[str, int]] = {}
        self.published: set[int] = set()
        self.pubreced: set[int] = set()  # the broker acknowledged these: on its disk
        self.completed = 0  # PUBCOMP received
        self.odd_acks = 0  # PUBREC/PUBCOMP for an id in another state (re-sends; counted)
        self._next_no = first_no
        self._next_pid = 1
        self._finishing = threading.Event()

    def finish(self) -> None:
        self._finishing.set()

    def _publish(self, pid: int, no: int, dup: bool) -> bytes:
        payload = no.to_bytes(8, "big") + self.filler
        return encode(Publish(self.topic, payload, 2, False, dup, pid))

    def _new_pid(self) -> int:
        while True:
            pid = self._next_pid
            self._next_pid = pid % 65535 + 1
            if pid not in self.open:  # 2.3.1: reusable only after PUBCOMP
                return pid

    def session(self, sock: socket.socket) -> None:
        sock.settimeout(IO_TIMEOUT)
        # MQTT-4.4.0-1: re-send unacknowledged PUBLISH (DUP) and PUBREL, original ids/order.
        out = [self._publish(pid, no, True) if state == "pub" else encode(Pubrel(pid))
               for pid, (state, no) in self.open.items()]  # fmt: skip
        while True:
            while not self._finishing.is_set() and len(self.open) < self.window:
                pid, no = self._new_pid(), self._next_no
                self._next_no += 1
                self.open[pid] = ("pub", no)
                self.published.add(no)
                out.append(self._publish(pid, no, False))
            if out:
                sock.sendall(b"".join(out))
                out = []
            if self._finishing.is_set() and not self.open:
                sock.sendall(b"\xe0\x00")  # DISCONNECT
                self.done.set()
                return
            for p in self._packets(sock):
                if isinstance(p, Pubrec):
                    e = self.open.get(p.packet_id)
                    if e is None:
                        self.odd_acks += 1
                        continue
                    if e[0] == "pub":
                        self.pubreced.add(e[1])
                        del self.open[p.packet_id]  # re-inserted: the PUBREL is sent now
                        self.open[p.packet_id] = ("rel", e[1])
                    else:
                        self.odd_acks += 1
                    out.append(encode(Pubrel(p.packet_id)))
                elif isinstance(p, Pubcomp):
                    e = self.open.get(p.packet_id)
                    if e is not None and e[0] == "rel":
                        del self.open[p.packet_id]
                        self.completed += 1
                    else:
                        self.odd_acks += 1
                else:
                    raise AssertionError(f"{self.client_id}: unexpected {p}")


class SpecSubscriber(_Peer):
    """Subscribes ``flt`` at QoS 2 once, then receives as 4.3.3 method B says. With
    ``online=False`` it only subscribes and leaves until ``drain()`` lets it back."""

    def __init__(self, endpoint: Endpoint, client_id: str, flt: str, online: bool = True
                 ) -> None:  # fmt: skip
        super().__init__(endpoint, client_id)
        self.flt = flt
        self.held: dict[int, int] = {}  # packet id -> message number (PUBREC sent)
        self.handed_on: list[int] = []  # message numbers delivered onward, in order
        self.recognised = 0  # re-sent copies treated as duplicates (not handed on)
        self.swallowed: list[tuple[int, int, int]] = []  # (packet id, held no, new no)
        self.wrong_qos: list[int] = []
        self.subscribed = threading.Event()
        self._online = threading.Event()
        if online:
            self._online.set()
        self._stop = threading.Event()

    def drain(self) -> None:
        """Come back online (an offline subscriber) and receive what is queued."""
        self._online.set()

    def stop(self) -> None:
        self._stop.set()

    def session(self, sock: socket.socket) -> None:
        if not self.subscribed.is_set():
            sock.settimeout(IO_TIMEOUT)
            sock.sendall(encode(Subscribe(1, ((self.flt, 2),))))
            ack = self._next(sock)
            assert ack == Suback(1, (2,)), ack
            self.subscribed.set()
        if not self._online.is_set():
            sock.sendall(b"\xe0\x00")  # offline until drain()
            self._online.wait()
            raise ConnectionError("back online: reconnect")
        sock.settimeout(0.2)
        while True:
            try:
                packets = self._packets(sock)
            except TimeoutError:
                if self._stop.is_set():
                    sock.sendall(b"\xe0\x00")
                    self.done.set()
                    return
                continue
            out = []
            for p in packets:
                if isinstance(p, Publish):
                    pid = p.packet_id or 0
                    no = int.from_bytes(p.payload[:8], "big")
                    if p.qos != 2:
                        self.wrong_qos.append(no)
                        continue
                    if pid in self.held:  # MQTT-4.3.3-2: a duplicate, not handed on
                        if self.held[pid] == no:
                            self.recognised += 1
                        else:
                            self.swallowed.append((pid, self.held[pid], no))
                    else:
                        self.held[pid] = no
                        self.handed_on.append(no)
                    out.append(encode(Pubrec(pid)))
                elif isinstance(p, Pubrel):
                    self.held.pop(p.packet_id, None)
                    out.append(encode(Pubcomp(p.packet_id)))
                elif not isinstance(p, Pingresp):
                    raise AssertionError(f"{self.client_id}: unexpected {p}")
            if out:
                sock.sendall(b"".join(out))

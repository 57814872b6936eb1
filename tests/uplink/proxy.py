"""A TCP forwarder on loopback that the uplink tests use to break the link on purpose.

``Proxy(host, port)`` listens on a free loopback port (``.port``) and forwards every accepted
connection to ``host:port``. The failure modes an uplink must survive:

- ``freeze()``: every socket stays open but no byte moves in either direction: the silent dead
  link (a pulled cable, a NAT that dropped its state) that only heartbeats / keep-alive detect.
  Connections accepted while frozen complete the TCP handshake but are not connected upstream
  and get no byte until ``thaw()``.
- ``thaw()``: forwarding resumes; bytes held while frozen are delivered.
- ``drop()``: close every current connection, both sides (RST by default, FIN with
  ``rst=False``): an abrupt outage the link sees at once. New connections are served as usual.
- ``close()``: stop listening and drop everything.

``client_closed`` is set once a client closed its side (FIN or RST), not the proxy nor the
target: how a test sees that a link let go of its socket.

One thread runs a ``select`` loop over non-blocking sockets, so a peer that stops reading stalls
only its own connection. Control calls are run by that thread and return once they took effect:
after ``freeze()`` returns, no further byte is forwarded.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

_CHUNK = 65536
_HIGH_WATER = 1 << 20   # stop reading a side while this much waits for the other side


@dataclass(eq=False)
class _Pair:
    """One proxied connection: the accepted client and (once forwarding) its upstream."""

    client: socket.socket
    upstream: socket.socket | None = None
    to_upstream: bytearray = field(default_factory=bytearray)
    to_client: bytearray = field(default_factory=bytearray)
    eof: bool = False   # one side closed: flush what is buffered, then close both

    def sockets(self) -> list[socket.socket]:
        return [self.client] + ([self.upstream] if self.upstream is not None else [])


def _abort(sock: socket.socket, rst: bool) -> None:
    """Close ``sock``; with ``rst`` the peer gets a TCP RST instead of a FIN (SO_LINGER 0)."""
    with contextlib.suppress(OSError):
        if rst:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()


class Proxy:
    """A loopback TCP forwarder to ``target_host:target_port`` (see the module docstring)."""

    def __init__(self, target_host: str, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server((host, 0))
        self._listener.setblocking(False)
        self.host = host
        self.port: int = int(self._listener.getsockname()[1])
        self.accepted = 0            # connections accepted so far
        self.client_closed = threading.Event()
        self._pairs: list[_Pair] = []
        self._frozen = False
        self._closed = False
        self._calls: list[tuple[Callable[[], None], threading.Event]] = []
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._thread = threading.Thread(target=self._run, name=f"proxy:{self.port}",
                                        daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------- control
    def freeze(self) -> None:
        """Stop forwarding in both directions; keep every socket open (no FIN, no RST)."""
        self._call(lambda: setattr(self, "_frozen", True))

    def thaw(self) -> None:
        """Resume forwarding (held bytes go first; connections accepted meanwhile connect)."""
        self._call(lambda: setattr(self, "_frozen", False))

    @property
    def frozen(self) -> bool:
        return self._frozen

    @property
    def live(self) -> int:
        """Connections currently open through the proxy."""
        with self._lock:
            return len(self._pairs)

    def drop(self, rst: bool = True) -> int:
        """Close every current connection on both sides; returns how many were closed."""
        count = 0

        def do() -> None:
            nonlocal count
            count = len(self._pairs)
            for pair in self._pairs:
                for sock in pair.sockets():
                    _abort(sock, rst)
            with self._lock:
                self._pairs = []

        self._call(do)
        return count

    def close(self) -> None:
        """Stop listening, close every connection, end the thread."""
        if self._closed:
            return
        self.drop(rst=False)
        self._closed = True
        self._wake()
        self._thread.join(10)
        for sock in (self._listener, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                sock.close()

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _call(self, fn: Callable[[], None], timeout: float = 10.0) -> None:
        """Run ``fn`` on the proxy thread and wait until it ran (so its effect is in place)."""
        if self._closed:
            raise RuntimeError("proxy closed")
        done = threading.Event()
        with self._lock:
            self._calls.append((fn, done))
        self._wake()
        if not done.wait(timeout):
            raise RuntimeError("proxy thread did not answer")

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    # ----------------------------------------------------------------- the loop
    def _run(self) -> None:
        while not self._closed:
            with self._lock:
                calls, self._calls = self._calls, []
            for fn, done in calls:
                try:
                    fn()
                finally:
                    done.set()
            if not self._frozen:
                self._connect_pending()
            readers: list[socket.socket] = [self._listener, self._wake_r]
            writers: list[socket.socket] = []
            if not self._frozen:
                for pair in self._pairs:
                    up = pair.upstream
                    if up is None:
                        continue  # accepted this round: connected upstream next round
                    if not pair.eof and len(pair.to_upstream) < _HIGH_WATER:
                        readers.append(pair.client)
                    if not pair.eof and len(pair.to_client) < _HIGH_WATER:
                        readers.append(up)
                    if pair.to_upstream:
                        writers.append(up)
                    if pair.to_client:
                        writers.append(pair.client)
            try:
                readable, writable, _ = select.select(readers, writers, [], 0.5)
            except (OSError, ValueError):
                continue  # a socket closed under us by drop(); rebuild the lists
            if self._wake_r in readable:
                with contextlib.suppress(OSError):
                    self._wake_r.recv(4096)
            if self._listener in readable:
                self._accept()
            if self._frozen:
                continue
            for pair in list(self._pairs):
                if pair.upstream is not None:  # else accepted just now: connects next round
                    self._pump(pair, readable, writable)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, OSError):
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.accepted += 1
            with self._lock:
                self._pairs.append(_Pair(sock))

    def _connect_pending(self) -> None:
        for pair in list(self._pairs):
            if pair.upstream is not None:
                continue
            try:
                up = socket.create_connection(self.target, timeout=5)
            except OSError:
                # Target down: the client sees its connection closed, as a refused connect
                # through a NAT would look.
                self._close_pair(pair, rst=True)
                continue
            up.setblocking(False)
            up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair.upstream = up

    def _pump(self, pair: _Pair, readable: list[socket.socket],
              writable: list[socket.socket]) -> None:
        up = pair.upstream
        assert up is not None
        try:
            for src, buf in ((pair.client, pair.to_upstream), (up, pair.to_client)):
                if src in readable:
                    data = self._recv(pair, src)
                    if not data:
                        pair.eof = True
                    buf += data
            for dst, buf in ((up, pair.to_upstream), (pair.client, pair.to_client)):
                if buf and (dst in writable or pair.eof):
                    if pair.eof:
                        dst.setblocking(True)
                        dst.settimeout(2)
                        dst.sendall(buf)
                        buf.clear()
                    else:
                        sent = dst.send(buf)
                        del buf[:sent]
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close_pair(pair, rst=True)
            return
        if pair.eof:
            self._close_pair(pair, rst=False)

    def _recv(self, pair: _Pair, src: socket.socket) -> bytes:
        """Read from ``src``; an EOF or reset from the client sets ``client_closed``."""
        try:
            data = src.recv(_CHUNK)
        except (BlockingIOError, InterruptedError):
            raise
        except OSError:
            if src is pair.client:
                self.client_closed.set()
            raise
        if not data and src is pair.client:
            self.client_closed.set()
        return data

    def _close_pair(self, pair: _Pair, rst: bool) -> None:
        for sock in pair.sockets():
            _abort(sock, rst)
        with self._lock:
            if pair in self._pairs:
                self._pairs.remove(pair)

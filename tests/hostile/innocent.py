"""The innocent MQTT client, run as its own process (``python -m tests.hostile.innocent``).

It lives in a separate process so that abuse threads in the test process (and their GIL)
cannot delay it: what it measures is the broker's responsiveness, not pytest's.

Protocol with the parent: argv = ``HOST PORT INTERVAL [USERNAME PASSWORD]``; it prints
``connected`` once the CONNACK (return code 0) came, then sends a PINGREQ every
``INTERVAL`` seconds and times the PINGRESP.  When its stdin closes (or gets a line) it
disconnects and prints one JSON line ``{"rtts_ms": [...], "errors": [...]}``.
"""

from __future__ import annotations

import json
import select
import socket
import sys
import time

from bench.mqttwire import connect_packet

PING_TIMEOUT = 10.0


def _read_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    buf = b""
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer")
        sock.settimeout(left)
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("server closed the connection")
        buf += chunk
    return buf


def main(argv: list[str]) -> int:
    host, port, interval = argv[0], int(argv[1]), float(argv[2])
    username = argv[3] if len(argv) > 3 else None
    password = argv[4] if len(argv) > 4 else None
    rtts: list[float] = []
    errors: list[str] = []
    sock = socket.create_connection((host, port), timeout=PING_TIMEOUT)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(connect_packet(f"innocent-{id(sock):x}", keepalive=600,
                                username=username, password=password))
    connack = _read_exact(sock, 4, time.monotonic() + PING_TIMEOUT)
    if connack[0] != 0x20 or connack[3] != 0:
        print(json.dumps({"rtts_ms": [], "errors": [f"CONNACK {connack.hex()}"]}), flush=True)
        return 1
    print("connected", flush=True)
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], interval)
        if ready:
            break
        t0 = time.monotonic()
        try:
            sock.sendall(b"\xc0\x00")
            answer = _read_exact(sock, 2, t0 + PING_TIMEOUT)
            if answer != b"\xd0\x00":
                errors.append(f"unexpected {answer.hex()}")
                break
            rtts.append((time.monotonic() - t0) * 1000.0)
        except (OSError, TimeoutError, ConnectionError) as exc:
            errors.append(f"{type(exc).__name__}: {exc} after {time.monotonic() - t0:.1f}s")
            break
    try:
        sock.sendall(b"\xe0\x00")
        sock.close()
    except OSError:
        pass
    print(json.dumps({"rtts_ms": rtts, "errors": errors}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

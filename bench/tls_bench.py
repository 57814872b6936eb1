"""MQTT over TLS: oxiedge against Mosquitto on the same certificate (issue 16, item 4).

    python -m bench.tls_bench [--count 100000] [--duration 10] [--repeats 3]
                              [--handshake-seconds 5] [--key-type ecdsa|rsa] [--plain]
                              [--json bench/results/tls.json]

Both brokers are started here on free loopback ports with one certificate (``trustme``: a
CA and a server certificate for ``localhost``; ECDSA P-256 by default, ``--key-type rsa``
for RSA-2048): oxiedge with ``--mqtt-tls-port``, Mosquitto with a ``listener`` carrying
``certfile``/``keyfile``. The clients verify the server (CA + host name), as a careful
device does; TLS version and cipher negotiated are printed per broker. Scenarios:

* ``tls-qos0``: one publisher streams QoS 0 → one subscriber, both over TLS; deliveries/s.
* ``tls-qos1``: QoS 1 with 500 in flight, no subscriber; PUBACKs/s.
* ``tls-handshakes``: for ``--handshake-seconds``, two client threads each loop TCP connect
  → TLS handshake → CONNECT/CONNACK → DISCONNECT; full handshakes (no resumption) per s.

``--plain`` adds the same QoS 0 / QoS 1 runs over plain TCP, for the cost of TLS itself.
Runs are interleaved (repeat → scenario → broker, order rotated) and medians reported, with
the broker's CPU per message from /proc. The load generator is Python on the same machine:
on 2 cores it competes with the broker, so the ratios, not the absolute numbers, are what
this measures.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import brokers
from bench.mqttwire import PUBACK_LEN, RawMqtt, publish_packet, qos1_ring
from bench.result import Meter

WINDOW = 500


class Endpoint:
    """One broker's MQTT address, with the TLS context its clients use (None: plain)."""

    def __init__(self, name: str, host: str, port: int, pid: int | None,
                 ctx: ssl.SSLContext | None) -> None:
        self.name, self.host, self.port, self.pid, self.ctx = name, host, port, pid, ctx

    def connect(self, client_id: str) -> RawMqtt:
        c = RawMqtt(self.host, self.port)
        if self.ctx is not None:
            c.sock = self.ctx.wrap_socket(c.sock, server_hostname="localhost")
        c.connect(client_id)
        return c


def _uid() -> str:
    return uuid.uuid4().hex[:10]


def qos0(ep: Endpoint, count: int, duration: float, payload: bytes) -> dict[str, Any]:
    topic = f"bench/{_uid()}/tls0"
    sub = ep.connect("tsub-" + _uid())
    sub.subscribe(topic, 0)
    pub = ep.connect("tpub-" + _uid())
    pkt = publish_packet(topic, payload, 0)
    size, batch = len(pkt), 256
    chunk = pkt * batch
    sent = [0]
    received = [len(sub.buf)]
    last = [0.0]
    meter = Meter(ep.pid)

    def send() -> None:
        deadline = time.perf_counter() + duration
        while sent[0] < count and time.perf_counter() < deadline:
            k = min(batch, count - sent[0])
            pub.sock.sendall(chunk if k == batch else pkt * k)
            sent[0] += k

    def receive() -> None:
        """SO_RCVLOWAT 64 KiB while the publisher runs, so a broker that writes one small
        segment (or TLS record) per message does not cost the generator a wake-up per
        message; back to 1 byte for the tail (as bench.scen_mqtt does)."""
        buf = bytearray(1 << 18)
        raw = sub.sock
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 64 * 1024)
        raw.settimeout(0.2)
        lowered, quiet_since = False, None
        while True:
            if not sender.is_alive():
                if received[0] >= sent[0] * size:
                    return
                if not lowered:
                    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
                    lowered = True
            try:
                n = raw.recv_into(buf)
            except TimeoutError:
                if not sender.is_alive():
                    quiet_since = quiet_since or time.perf_counter()
                    if time.perf_counter() - quiet_since > 3.0:
                        return
                continue
            except (ssl.SSLError, OSError):
                return
            if not n:
                return
            quiet_since = None
            received[0] += n
            last[0] = time.perf_counter()

    sender = threading.Thread(target=send, daemon=True)
    receiver = threading.Thread(target=receive, daemon=True)
    t0 = meter.start()
    sender.start()
    receiver.start()
    sender.join()
    receiver.join(duration + 30)
    meter.stop()
    got = received[0] // size
    elapsed = (last[0] or time.perf_counter()) - t0
    for c in (pub, sub):
        c.disconnect()
    return _result(meter, got, elapsed, lost=sent[0] - got)


def qos1(ep: Endpoint, count: int, duration: float, payload: bytes) -> dict[str, Any]:
    c = ep.connect("tq1-" + _uid())
    ring, size = qos1_ring(f"bench/{_uid()}/tls1", payload)
    view = memoryview(ring)
    sock = c.sock
    sent = acked = rem = 0
    buf = bytearray(1 << 16)

    def send(k: int) -> None:
        nonlocal sent
        while k:
            start = sent % 65535
            take = min(k, 65535 - start)
            sock.sendall(view[start * size:(start + take) * size])
            sent += take
            k -= take

    meter = Meter(ep.pid)
    t0 = meter.start()
    deadline = t0 + duration
    send(min(WINDOW, count))
    sock.settimeout(10.0)
    while acked < sent:
        try:
            n = sock.recv_into(buf)
        except TimeoutError:
            break
        if not n:
            break
        rem += n
        k = rem // PUBACK_LEN
        rem -= k * PUBACK_LEN
        acked += k
        if sent < count and time.perf_counter() < deadline:
            send(min(k, count - sent))
    t1 = meter.stop()
    view.release()
    c.disconnect()
    return _result(meter, acked, t1 - t0, lost=sent - acked)


def handshakes(ep: Endpoint, seconds: float, threads: int = 2) -> dict[str, Any]:
    """Full TLS handshakes + MQTT CONNECT/CONNACK per second (new connection each)."""
    done = [0] * threads
    errors: list[str] = []
    meter = Meter(ep.pid)
    stop_at = [0.0]

    def loop(i: int) -> None:
        while time.perf_counter() < stop_at[0]:
            try:
                c = ep.connect(f"ths-{i}-{done[i]}")
                c.disconnect()
                done[i] += 1
            except (OSError, ConnectionError) as exc:
                errors.append(str(exc))
                if len(errors) > 50:
                    return

    t0 = meter.start()
    stop_at[0] = t0 + seconds
    workers = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(seconds + 30)
    t1 = meter.stop()
    r = _result(meter, sum(done), t1 - t0, lost=len(errors))
    if errors:
        r["first_error"] = errors[0]
    return r


def _result(meter: Meter, count: int, elapsed: float, lost: int) -> dict[str, Any]:
    cpu = None
    if meter.before is not None and meter.after is not None:
        cpu = meter.after.cpu - meter.before.cpu
    return {"count": count, "elapsed": elapsed, "rate": count / elapsed if elapsed > 0 else 0.0,
            "lost": lost, "broker_cpu_us_per_op": cpu * 1e6 / count if cpu and count else None,
            "gen_cpu_pct": round(100 * (meter.gen1 - meter.gen0) / elapsed) if elapsed else None}


def _certificates(tmp: Path, key_type: str) -> tuple[Path, Path, Path]:
    import trustme

    kt = trustme.KeyType.RSA if key_type == "rsa" else trustme.KeyType.ECDSA
    ca = trustme.CA(key_type=kt)
    leaf = ca.issue_cert("localhost", "127.0.0.1", key_type=kt)
    cert, key, ca_file = tmp / "server.pem", tmp / "server.key", tmp / "ca.pem"
    cert.write_bytes(b"".join(p.bytes() for p in leaf.cert_chain_pems))
    key.write_bytes(leaf.private_key_pem.bytes())
    ca.cert_pem.write_to_path(str(ca_file))
    for path in (cert, key, ca_file):
        path.chmod(0o644)  # a throw-away key, readable by the Mosquitto user
    return cert, key, ca_file


def _start_mosquitto_tls(tmp: Path, cert: Path, key: Path) -> tuple[Any, int, int]:
    import subprocess

    port, plain = brokers.free_port(), brokers.free_port()
    conf = tmp / "mosquitto.conf"
    conf.write_text(
        f"per_listener_settings false\nallow_anonymous true\npersistence false\n"
        # Mosquitto's own latency option (oxiedge's sockets are TCP_NODELAY, trio's
        # default): without it its CONNACK waits for the client's delayed ACK.
        f"set_tcp_nodelay true\n"
        f"max_queued_messages 4096\nlog_dest file {tmp}/mosquitto.log\n"
        f"listener {plain} 127.0.0.1\n"
        f"listener {port} 127.0.0.1\ncertfile {cert}\nkeyfile {key}\n")
    proc = brokers.popen_broker([brokers.mosquitto_exe(), "-c", str(conf)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    brokers.wait_port("127.0.0.1", port, 10)
    return proc, port, plain


def _tls_port(lines: list[str]) -> int:
    for line in lines:
        if line.startswith("MQTT TLS listening on "):
            return int(line.rsplit(":", 1)[1].split()[0])
    raise RuntimeError("oxiedge logged no 'MQTT TLS listening on' line")


def _describe(ep: Endpoint) -> str:
    assert ep.ctx is not None
    c = RawMqtt(ep.host, ep.port)
    s = ep.ctx.wrap_socket(c.sock, server_hostname="localhost")
    cipher, version = s.cipher(), s.version()
    s.close()
    return f"{version} {cipher[0] if cipher else '?'}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tls_bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--payload", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--handshake-seconds", type=float, default=5.0)
    ap.add_argument("--key-type", choices=("ecdsa", "rsa"), default="ecdsa")
    ap.add_argument("--plain", action="store_true", help="also QoS 0/1 over plain TCP")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="bench-tls-"))
    tmp.chmod(0o755)  # Mosquitto started as root reads them as the mosquitto user
    cert, key, ca_file = _certificates(tmp, args.key_type)
    ctx = ssl.create_default_context(cafile=str(ca_file))
    oxi = brokers.start_oxiedge(["--amqp-port", "off", "--mqtt-tls-port", "0",
                                 "--tls-cert", str(cert), "--tls-key", str(key)])
    mosq_proc, mosq_port, mosq_plain = _start_mosquitto_tls(tmp, cert, key)
    try:
        assert oxi.target.mqtt is not None
        host = oxi.target.mqtt[0]
        eps = [Endpoint("oxiedge", host, _tls_port(oxi.log_lines), oxi.target.pid, ctx),
               Endpoint("mosquitto", "127.0.0.1", mosq_port, mosq_proc.pid, ctx)]
        plain = [Endpoint("oxiedge", host, oxi.target.mqtt[1], oxi.target.pid, None),
                 Endpoint("mosquitto", "127.0.0.1", mosq_plain, mosq_proc.pid, None)]
        for ep in eps:
            print(f"{ep.name}: {_describe(ep)} ({args.key_type} certificate)", flush=True)
        payload = os.urandom(args.payload)
        scen: dict[str, Callable[[Endpoint], dict[str, Any]]] = {
            "tls-qos0": lambda ep: qos0(ep, args.count, args.duration, payload),
            "tls-qos1": lambda ep: qos1(ep, args.count, args.duration, payload),
            "tls-handshakes": lambda ep: handshakes(ep, args.handshake_seconds),
        }
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for rep in range(args.repeats):
            for name, fn in scen.items():
                order = eps if rep % 2 == 0 else eps[::-1]
                for ep in order:
                    r = fn(ep)
                    runs.setdefault((name, ep.name), []).append(r)
                    print(f"  repeat {rep + 1} {name:15s} {ep.name:10s} {r['rate']:10.0f}/s "
                          f"cpu/op {r['broker_cpu_us_per_op'] or 0:6.1f} us "
                          f"gen {r['gen_cpu_pct']}% lost {r['lost']}", flush=True)
            if args.plain:
                for name, fn in (("plain-qos0", scen["tls-qos0"]),
                                 ("plain-qos1", scen["tls-qos1"]),
                                 ("plain-connects", scen["tls-handshakes"])):
                    for ep in (plain if rep % 2 == 0 else plain[::-1]):
                        r = fn(ep)
                        runs.setdefault((name, ep.name), []).append(r)
                        print(f"  repeat {rep + 1} {name:15s} {ep.name:10s} "
                              f"{r['rate']:10.0f}/s", flush=True)
    finally:
        oxi.stop()
        brokers.terminate(mosq_proc)
    summary = _summary(runs)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                         "summary": summary,
                                         "runs": {f"{k[0]}/{k[1]}": v for k, v in runs.items()}},
                                        indent=1, default=str))
    return 0


def _summary(runs: dict[tuple[str, str], list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    print("\nmedians (oxiedge / mosquitto):")
    for name in dict.fromkeys(k[0] for k in runs):
        med = {b: statistics.median(r["rate"] for r in runs[(name, b)])
               for b in ("oxiedge", "mosquitto") if (name, b) in runs}
        cpu = {b: statistics.median(r["broker_cpu_us_per_op"] or 0 for r in runs[(name, b)])
               for b in med}
        ratio = med["oxiedge"] / med["mosquitto"] if med.get("mosquitto") else None
        out[name] = {"rate": med, "broker_cpu_us_per_op": cpu, "ratio": ratio}
        print(f"  {name:15s} oxiedge {med['oxiedge']:10.0f}/s ({cpu['oxiedge']:.1f} us/op)  "
              f"mosquitto {med['mosquitto']:10.0f}/s ({cpu['mosquitto']:.1f} us/op)  "
              f"ratio {ratio:.2f}" if ratio is not None else "")
    return out


if __name__ == "__main__":
    raise SystemExit(main())

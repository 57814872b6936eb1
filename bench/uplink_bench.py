"""oxiedge's uplink against Mosquitto's bridge, both forwarding to the same upstream broker.

``python -m bench.uplink_bench [--messages N] [--repeats R] [--payload BYTES]``

Theory of operation
-------------------
Every run starts a fresh *upstream* Mosquitto and a fresh *peer* on free loopback ports:

* ``oxiedge``: ``oxiedge uplink add up mqtt://127.0.0.1:UP --out 'bench/#'`` (offline, on a
  new data dir), then ``oxiedge serve`` on that data dir. Every local QoS 1 message is in
  the durable outbox (RocksDB, synced group commit) before its PUBACK.
* ``mosquitto``: a local Mosquitto with a ``connection`` bridge section, ``topic bench/#
  out 1``, ``cleansession false``, ``restart_timeout 1 1``, ``max_queued_messages`` above N,
  and ``max_inflight_messages`` equal to oxiedge's uplink window (256) so both keep the
  same number of unacknowledged QoS 1 messages on the link. Its queue is in RAM.

A QoS 1 subscriber (persistent session, ``bench/#``) sits on the upstream. Our own raw
MQTT code (``mqttwire``) publishes and subscribes; one ``selectors`` loop drives both
sockets so no thread competes for the GIL. Each payload starts with the message's index
(8 bytes, big endian); the subscriber counts every index, so a missing message or a
duplicate shows up by number.

Scenarios (each for both peers, interleaved; peer order rotated every repeat):

``live``
    Upstream up and connected. A pipelined QoS 1 publisher (500 in flight, a new PUBLISH
    per PUBACK) sends N messages to the local broker. Rate = N / (first publish -> the
    upstream subscriber has all N).
``backlog``
    The link is up, then the upstream is stopped; N QoS 1 messages are published locally
    (all PUBACKed), then the upstream starts again on the same port. Drain rate = N /
    (first -> last message at the upstream subscriber), which leaves out the reconnect
    back-off; time-to-drain = upstream start -> last message, which includes it.

The upstream runs with ``persistence true`` and ``autosave_interval 0``: it writes its
database only when it exits, never during a measurement, so it behaves as an in-memory
broker while measured; the file only carries the subscriber's session across the restart
of the backlog scenario, so no message can reach the upstream before the subscriber's
session exists (with persistence off that would be a race with the peer's reconnect).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import selectors
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import brokers, machine, procstat
from bench.mqttwire import RawMqtt, puback_packet, publish_packet
from bench.profile import read_stacks
from bench.report import table
from bench.result import own_cpu

TOPIC = "bench/uplink"
PROBE_TOPIC = "bench/probe"
PUB_WINDOW = 500        # local publisher: QoS 1 PUBLISHes in flight
LINK_WINDOW = 256       # oxiedge's default --window; Mosquitto's max_inflight_messages
UP_INFLIGHT = 1000      # upstream -> subscriber QoS 1 in flight
SCENARIOS = ("live", "backlog")
PEERS = ("oxiedge", "mosquitto")
RESULTS = Path(__file__).resolve().parent / "results"
_PUBACKS = [puback_packet(i) for i in range(65536)]
_TOPIC_B = TOPIC.encode()
_PROBE_B = PROBE_TOPIC.encode()
DURABILITY_NOTE = (
    "Durability is unequal, in Mosquitto's favour: Mosquitto's bridge queue is in RAM (a "
    "restart or crash of the local Mosquitto loses every message not yet forwarded; here "
    "persistence is off), while oxiedge's outbox is on disk, written in the same group "
    "commit as the local PUBACK (one fsync per group commit) and deleted only after the "
    "upstream PUBACK.")


def _mosquitto_dir(prefix: str) -> Path:
    """A temp dir Mosquitto can write to: started as root it runs as user ``mosquitto``."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    with contextlib.suppress(KeyError, OSError):
        import pwd

        pw = pwd.getpwnam("mosquitto")
        if os.geteuid() == 0:
            os.chown(tmp, pw.pw_uid, pw.pw_gid)
    return tmp


# ----------------------------------------------------------------- processes
def _run_mosquitto(conf: Path) -> subprocess.Popen[bytes]:
    return brokers.popen_broker([brokers.mosquitto_exe(), "-c", str(conf)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Upstream:
    """The upstream Mosquitto: one port for its whole life, restartable on it."""

    def __init__(self) -> None:
        self.tmp = _mosquitto_dir("bench-uplink-up-")
        self.port = brokers.free_port()
        (self.tmp / "mosquitto.conf").write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\n"
            # Saved only at exit (see the module docstring): in memory while measured.
            f"persistence true\npersistence_location {self.tmp}/\nautosave_interval 0\n"
            f"max_queued_messages 0\nmax_inflight_messages {UP_INFLIGHT}\n"
            f"log_dest file {self.tmp}/mosquitto.log\n")
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    def start(self) -> None:
        self.started_at = time.monotonic()
        self.proc = _run_mosquitto(self.tmp / "mosquitto.conf")

    def stop(self) -> None:
        if self.proc is not None:
            brokers.terminate(self.proc)
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


class Peer:
    """The local broker that forwards ``bench/#`` upstream."""

    name = ""
    proc_pid: int | None = None
    mqtt: tuple[str, int] = ("127.0.0.1", 0)
    log_path: Path | None = None

    def log_text(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def wait_lost(self, timeout: float) -> bool:
        """Wait until the peer has noticed the upstream went away (True if it did)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._lost_re.search(self.log_text()):
                return True
            time.sleep(0.01)
        return False

    _lost_re = re.compile("(?!)")

    def stop(self) -> None:
        raise NotImplementedError


class OxiedgePeer(Peer):
    name = "oxiedge"
    _lost_re = re.compile(r"uplink up lost")

    def __init__(self, upstream_port: int, window: int) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-uplink-oxi-"))
        data = self.tmp / "data"
        subprocess.run([*brokers.oxiedge_command(), "uplink", "add", "up",
                        f"mqtt://127.0.0.1:{upstream_port}", "--out", "bench/#",
                        "--window", str(window), "--data", str(data)],
                       check=True, stdout=subprocess.DEVNULL, cwd=self.tmp,
                       env=brokers._with_repo_on_path(None))
        self.st = brokers.start_oxiedge(["--device-id", "bench"], data=data)
        assert self.st.target.mqtt is not None
        self.mqtt = self.st.target.mqtt
        self.proc_pid = self.st.target.pid
        self.log_path = self.st.target.log_path

    def stop(self) -> None:
        self.st.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


class MosquittoBridgePeer(Peer):
    name = "mosquitto"
    # Mosquitto logs the bridge's own socket going away as a client disconnect/error.
    _lost_re = re.compile(r"Client local\.\S+ (closed its connection|disconnected)"
                          r"|Socket error on client local\.")

    def __init__(self, upstream_port: int, messages: int, window: int) -> None:
        self.tmp = _mosquitto_dir("bench-uplink-mosq-")
        port = brokers.free_port()
        self.log_path = self.tmp / "mosquitto.log"
        (self.tmp / "mosquitto.conf").write_text(
            f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
            # The bridge's queue must hold the whole backlog (default 1000 would drop).
            f"max_queued_messages {max(100_000, 2 * messages)}\n"
            f"max_inflight_messages {window}\n"
            f"log_dest file {self.log_path}\n"
            "connection up\n"
            f"address 127.0.0.1:{upstream_port}\n"
            "topic bench/# out 1\n"
            "cleansession false\n"
            # "1 1" = constant 1 s: Mosquitto 2.0.11 with a lone "restart_timeout 1" was
            # seen waiting ~5 s (its default jittered back-off, base 5 s, stayed on).
            "restart_timeout 1 1\n"
            "keepalive_interval 30\n"
            "notifications false\n"
            "bridge_protocol_version mqttv311\n")
        self.proc = _run_mosquitto(self.tmp / "mosquitto.conf")
        brokers.wait_port("127.0.0.1", port, 10)
        self.mqtt = ("127.0.0.1", port)
        self.proc_pid = self.proc.pid

    def stop(self) -> None:
        brokers.terminate(self.proc)
        shutil.rmtree(self.tmp, ignore_errors=True)


def start_peer(name: str, upstream_port: int, messages: int, window: int) -> Peer:
    if name == "oxiedge":
        return OxiedgePeer(upstream_port, window)
    return MosquittoBridgePeer(upstream_port, messages, window)


# ------------------------------------------------------------------ clients
class Sink:
    """The upstream subscriber's bookkeeping: parses PUBLISHes, counts every index."""

    def __init__(self, messages: int) -> None:
        self.seen = bytearray(messages)  # deliveries per index, capped at 255
        self.unique = 0
        self.duplicates = 0
        self.probes = 0
        self.foreign = 0                 # PUBLISHes that are neither ours nor a probe
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.complete_at: float | None = None
        self.buf = bytearray()

    def feed(self, data: bytes | bytearray, now: float) -> bytes:
        """Take bytes from the socket; returns the PUBACKs to send for them."""
        buf = self.buf
        buf += data
        seen, n = self.seen, len(self.seen)
        acks: list[bytes] = []
        i, end_buf = 0, len(buf)
        got = False
        while end_buf - i >= 2:
            # Remaining Length, 1-4 bytes of 7 bits each (MQTT 2.2.3).
            length, shift, j, whole = 0, 0, i + 1, False
            while j < end_buf:
                d = buf[j]
                j += 1
                length |= (d & 0x7F) << shift
                shift += 7
                if not d & 0x80:
                    whole = True
                    break
            if not whole:
                break
            end = j + length
            if end > end_buf:
                break
            first = buf[i]
            if first & 0xF0 == 0x30:
                qos = (first >> 1) & 3
                tlen = (buf[j] << 8) | buf[j + 1]
                topic_end = j + 2 + tlen
                p = topic_end
                if qos:
                    acks.append(_PUBACKS[(buf[p] << 8) | buf[p + 1]])
                    p += 2
                topic = buf[j + 2:topic_end]
                if topic == _TOPIC_B and end - p >= 8:
                    idx = int.from_bytes(buf[p:p + 8], "big")
                    if idx < n:
                        c = seen[idx]
                        if c:
                            self.duplicates += 1
                        else:
                            self.unique += 1
                        if c < 255:
                            seen[idx] = c + 1
                        got = True
                    else:
                        self.foreign += 1
                elif topic == _PROBE_B:
                    self.probes += 1
                else:
                    self.foreign += 1
            i = end
        del buf[:i]
        if got:
            if self.first_at is None:
                self.first_at = now
            self.last_at = now
            if self.complete_at is None and self.unique == n:
                self.complete_at = now
        return b"".join(acks)


def publishes(messages: int, payload: int) -> tuple[bytes, int]:
    """N QoS 1 PUBLISH packets back to back, all the same size; index i in the payload."""
    pad = b"x" * (payload - 8)
    first = publish_packet(TOPIC, bytes(8) + pad, 1, 1)
    size = len(first)
    head = first[:size - payload - 2]
    pack = struct.Struct(">HQ").pack
    return b"".join([head + pack(i % 65535 + 1, i) + pad for i in range(messages)]), size


class Driver:
    """One ``selectors`` loop for the local publisher and the upstream subscriber."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.sel = selectors.DefaultSelector()
        self.sub: socket.socket | None = None
        self.pub: socket.socket | None = None
        self.out = b""
        self.off = 0               # bytes of ``out`` written
        self.size = 1
        self.acked = 0             # PUBACKs (4 bytes each) from the local broker
        self._ackbuf = 0
        self.acked_at: float | None = None
        self.pending_acks = b""    # subscriber PUBACKs not yet written

    def attach_sub(self, conn: RawMqtt) -> None:
        conn.sock.setblocking(False)
        self.sub = conn.sock
        self.sel.register(conn.sock, selectors.EVENT_READ, "sub")
        if conn.buf:  # a resumed session may deliver right behind the CONNACK
            self.pending_acks += self.sink.feed(bytes(conn.buf), time.monotonic())
            conn.buf.clear()

    def _forget(self, sock: socket.socket | None) -> None:
        """Unregister and close one of the two sockets (if it is there)."""
        if sock is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(sock)
            with contextlib.suppress(OSError):
                sock.close()

    def detach_sub(self) -> None:
        self._forget(self.sub)
        self.sub = None

    def start_publishing(self, conn: RawMqtt, out: bytes, size: int) -> None:
        conn.sock.setblocking(False)
        self.pub = conn.sock
        self.out, self.size, self.off, self.acked, self._ackbuf = out, size, 0, 0, 0
        self.acked_at = None
        self.sel.register(conn.sock, selectors.EVENT_READ, "pub")

    def _send_pub(self) -> None:
        assert self.pub is not None
        total = len(self.out) // self.size
        want = min(total, self.acked + PUB_WINDOW) * self.size
        if self.off < want:
            with contextlib.suppress(BlockingIOError):
                self.off += self.pub.send(memoryview(self.out)[self.off:want])

    def flush_acks(self) -> None:
        if self.pending_acks and self.sub is not None:
            try:
                k = self.sub.send(self.pending_acks)
                self.pending_acks = self.pending_acks[k:]
            except BlockingIOError:
                pass
            except OSError:
                self.pending_acks = b""

    def run(self, done: Any, deadline: float) -> bool:
        """Loop until ``done()`` or the deadline; False on timeout."""
        sink = self.sink
        total = len(self.out) // self.size if self.pub is not None else 0
        while not done():
            now = time.monotonic()
            if now > deadline:
                return False
            if self.pub is not None and self.off < len(self.out):
                self._send_pub()
            self.flush_acks()
            for key, _ev in self.sel.select(min(0.05, max(0.0, deadline - now))):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(1 << 20)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if key.data == "sub":
                    if not data:
                        self.detach_sub()
                        continue
                    self.pending_acks += sink.feed(data, time.monotonic())
                else:
                    if not data:
                        raise ConnectionError("local broker closed the publisher")
                    n = self._ackbuf + len(data)
                    self.acked += n // 4
                    self._ackbuf = n % 4
                    if self.acked >= total and self.acked_at is None:
                        self.acked_at = time.monotonic()
        self.flush_acks()
        return True

    def close(self) -> None:
        self.detach_sub()
        self._forget(self.pub)
        self.pub = None
        self.sel.close()


def connect_subscriber(port: int, timeout: float, poll: float = 0.002) -> tuple[RawMqtt, bool]:
    """Connect the upstream subscriber as soon as the port accepts; (client, session present).

    Polls every ``poll`` seconds so it is in before any peer's reconnect back-off ends."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn = RawMqtt("127.0.0.1", port, timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(poll)
    present = conn.connect("bench-uplink-sub", clean=False)
    return conn, present


# ----------------------------------------------------------------- one run
@dataclass
class Run:
    """One scenario for one peer (times in seconds, rates in messages/s)."""

    scenario: str
    peer: str
    repeat: int
    messages: int
    payload: int
    rate: float | None = None            # live: end to end; backlog: drain (first->last)
    seconds: float | None = None         # the interval ``rate`` is over
    local_rate: float | None = None      # PUBACKs/s from the local broker
    time_to_drain: float | None = None   # backlog: upstream start -> last message
    reconnect_delay: float | None = None  # backlog: upstream start -> first message
    unique: int = 0
    duplicates: int = 0
    missing: int = 0
    foreign: int = 0
    peer_cpu_us_per_msg: float | None = None
    upstream_cpu_us_per_msg: float | None = None
    peer_rss_mb: float | None = None
    gen_cpu_pct: float | None = None
    noticed_loss: bool | None = None
    session_present: bool | None = None
    profiled: bool = False
    load1: float | None = None           # 1-minute load average when the run started
    error: str | None = None
    notes: list[str] = field(default_factory=list)


class _Meter:
    """CPU of the peer, the upstream and this process over one phase."""

    def __init__(self, peer_pid: int | None, up_pid: int | None) -> None:
        self.pids = (peer_pid, up_pid)
        self.start = [self._cpu(p) for p in self.pids]
        self.own = own_cpu()
        self.t = time.monotonic()

    @staticmethod
    def _cpu(pid: int | None) -> float | None:
        s = procstat.sample(pid)
        return s.cpu if s is not None else None

    def finish(self, r: Run, messages: int, up_pid: int | None) -> None:
        wall = max(1e-9, time.monotonic() - self.t)
        peer_now = self._cpu(self.pids[0])
        if peer_now is not None and self.start[0] is not None:
            r.peer_cpu_us_per_msg = (peer_now - self.start[0]) / messages * 1e6
        up_start = self.start[1] if up_pid == self.pids[1] else 0.0  # restarted: all of it
        up_now = self._cpu(up_pid)
        if up_now is not None and up_start is not None:
            r.upstream_cpu_us_per_msg = (up_now - up_start) / messages * 1e6
        s = procstat.sample(self.pids[0])
        r.peer_rss_mb = s.rss / 1e6 if s is not None else None
        r.gen_cpu_pct = 100 * (own_cpu() - self.own) / wall


def profile_summary(raw: Path, top: int = 30) -> str:
    """py-spy collapsed stacks split by thread: the trio thread busy / idle in epoll, other
    threads (the WAL-sync thread, mostly waiting in ``fdatasync``); then the oxiedge
    functions on the busy trio thread's stacks (inclusive) and on top (own time)."""
    import collections

    parts: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for frames, n in read_stacks(raw):
        total += n
        if any("threading.py" in f for f in frames):
            parts["other threads (WAL-sync thread: flush_wal)"] += n
            continue
        if "get_events" in frames[-1]:
            parts["trio thread idle (epoll wait)"] += n
            continue
        parts["trio thread busy"] += n
        own[frames[-1]] += n
        for name in {f.split(" (")[0] for f in frames if "oxiedge/" in f}:
            incl[name] += n
    busy = max(1, parts["trio thread busy"])
    lines = [f"{total} samples"]
    lines += [f"  {100 * v / max(1, total):5.1f}%  {k}" for k, v in parts.most_common()]
    lines += ["", "oxiedge functions on the busy trio thread's stack (% of its samples):"]
    lines += [f"  {100 * v / busy:5.1f}%  {k}" for k, v in incl.most_common(top)
              if k not in ("main", "serve", "run")]
    lines += ["", "own time on the busy trio thread (% of its samples):"]
    lines += [f"  {100 * v / busy:5.1f}%  {k}" for k, v in own.most_common(top)]
    return "\n".join(lines)


class _Spy:
    """py-spy attached to oxiedge for one phase (``--py-spy``)."""

    def __init__(self, exe: str | None, pid: int | None, out: Path | None,
                 gil: bool = False) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.out = out
        if exe and pid and out:
            out.parent.mkdir(parents=True, exist_ok=True)
            self.proc = subprocess.Popen(
                [exe, "record", "--pid", str(pid), "--format", "raw", "--rate", "250",
                 "--output", str(out), "--nonblocking", *(["--gil"] if gil else [])],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # attach before the phase starts

    def stop(self) -> str | None:
        if self.proc is None or self.out is None:
            return None
        brokers.terminate(self.proc, signal.SIGINT, 30)
        if not self.out.exists():
            return None
        return profile_summary(self.out)


class _Rig:
    """One run's processes and clients: upstream, subscriber, peer, publisher."""

    def __init__(self, peer_name: str, args: argparse.Namespace) -> None:
        self.sink = Sink(args.messages)
        self.drv = Driver(self.sink)
        self.up = Upstream()
        self.peer: Peer | None = None
        self.pubc: RawMqtt | None = None
        try:
            self.up.start()
            brokers.wait_port("127.0.0.1", self.up.port, 10)
            sub, _present = connect_subscriber(self.up.port, 10)
            sub.subscribe("bench/#", 1)
            self.drv.attach_sub(sub)
            self.peer = start_peer(peer_name, self.up.port, args.messages, args.window)
            self.pubc = RawMqtt(*self.peer.mqtt)
            self.pubc.connect(f"bench-uplink-pub-{os.getpid()}", clean=True)
        except BaseException:
            self.close()  # whatever was started so far
            raise

    def probe(self) -> None:
        """One message end to end: the peer is connected upstream, the subscriber is in."""
        assert self.pubc is not None
        self.pubc.sock.sendall(publish_packet(PROBE_TOPIC, b"probe", 1, 1))
        self.pubc.read_packet()
        if not self.drv.run(lambda: self.sink.probes >= 1, time.monotonic() + 30):
            raise RuntimeError("the probe never reached the upstream (peer not connected)")

    def close(self) -> None:
        self.drv.close()
        if self.pubc is not None:
            self.pubc.close()
        if self.peer is not None:
            self.peer.stop()
        self.up.close()


def _measure_live(rig: _Rig, r: Run, packets: tuple[bytes, int], deadline: float,
                  spy: Callable[[], _Spy]) -> _Spy:
    """Publish N with the link up; N / (first publish -> all N upstream)."""
    drv, sink, n, peer = rig.drv, rig.sink, r.messages, rig.peer
    assert peer is not None and rig.pubc is not None
    up_pid = rig.up.proc.pid if rig.up.proc else None
    profiler = spy()
    meter = _Meter(peer.proc_pid, up_pid)
    t0 = time.monotonic()
    drv.start_publishing(rig.pubc, *packets)
    ok = drv.run(lambda: sink.complete_at is not None and drv.acked >= n, deadline)
    meter.finish(r, n, up_pid)
    if ok and sink.complete_at is not None:
        r.seconds = sink.complete_at - t0
        r.rate = n / r.seconds
    if drv.acked_at is not None:
        r.local_rate = n / (drv.acked_at - t0)
    return profiler


def _measure_backlog(rig: _Rig, r: Run, packets: tuple[bytes, int], deadline: float,
                     spy: Callable[[], _Spy]) -> _Spy:
    """Upstream down, N published locally, upstream back: drain rate and time to drain."""
    drv, sink, n, peer, up = rig.drv, rig.sink, r.messages, rig.peer, rig.up
    assert peer is not None and rig.pubc is not None
    drv.flush_acks()  # the probe's PUBACK, so the upstream does not redeliver it
    up.stop()
    drv.detach_sub()
    r.noticed_loss = peer.wait_lost(10)
    t0 = time.monotonic()
    drv.start_publishing(rig.pubc, *packets)
    if not drv.run(lambda: drv.acked >= n, deadline):
        raise RuntimeError(f"only {drv.acked} of {n} local PUBACKs with the upstream down")
    assert drv.acked_at is not None
    r.local_rate = n / (drv.acked_at - t0)
    profiler = spy()
    meter = _Meter(peer.proc_pid, None)
    up.start()
    sub, present = connect_subscriber(up.port, 10)
    r.session_present = present
    if not present:
        r.notes.append("upstream lost the subscriber's session: resubscribed")
        sub.subscribe("bench/#", 1)
    drv.attach_sub(sub)
    ok = drv.run(lambda: sink.complete_at is not None, deadline)
    meter.finish(r, n, up.proc.pid if up.proc else None)
    if ok and sink.complete_at is not None and sink.first_at is not None:
        r.seconds = sink.complete_at - sink.first_at
        r.rate = n / r.seconds if r.seconds > 0 else None
        r.time_to_drain = sink.complete_at - up.started_at
        r.reconnect_delay = sink.first_at - up.started_at
    return profiler


def run_one(scenario: str, peer_name: str, repeat: int, args: argparse.Namespace,
            packets: tuple[bytes, int]) -> Run:
    """Fresh upstream + peer, then one measured scenario; everything stopped at the end."""
    n = args.messages
    r = Run(scenario, peer_name, repeat, n, args.payload, load1=os.getloadavg()[0])
    rig: _Rig | None = None
    profiler: _Spy | None = None
    try:
        rig = _Rig(peer_name, args)
        rig.probe()
        assert rig.peer is not None
        want = args.py_spy if peer_name == "oxiedge" else None
        out = (args.profile_dir / f"uplink-{scenario}-r{repeat}.stacks"
               if want and args.profile_dir else None)
        pid = rig.peer.proc_pid

        def spy() -> _Spy:
            return _Spy(want, pid, out, args.py_spy_gil)

        measure = _measure_live if scenario == "live" else _measure_backlog
        profiler = measure(rig, r, packets, time.monotonic() + args.timeout, spy)
        summary = profiler.stop()
        profiler = None
        if summary and out is not None:
            r.profiled = True
            out.with_suffix(".txt").write_text(summary + "\n")
        # Late duplicates: keep reading briefly (not part of any timing).
        rig.drv.run(lambda: False, time.monotonic() + args.grace)
        if r.rate is None:
            r.error = f"timed out after {args.timeout:g} s: {rig.sink.unique} of {n} arrived"
    except Exception as exc:  # one failed run must not lose the others
        r.error = f"{type(exc).__name__}: {exc}"
    finally:
        if profiler is not None:
            profiler.stop()
        if rig is not None:
            sink = rig.sink
            r.unique, r.duplicates, r.foreign = sink.unique, sink.duplicates, sink.foreign
            r.missing = n - sink.unique
            rig.close()
    return r


# ------------------------------------------------------------------ report
METRICS = [  # (scenario, Run attribute, label, unit, higher is better)
    ("live", "rate", "live: publish -> all at upstream", "msgs/s", True),
    ("live", "local_rate", "live: local PUBACKs", "msgs/s", True),
    ("backlog", "rate", "backlog: drain (first -> last upstream)", "msgs/s", True),
    ("backlog", "time_to_drain", "backlog: upstream start -> drained", "s", False),
    ("backlog", "reconnect_delay", "backlog: upstream start -> first msg", "s", False),
    ("backlog", "local_rate", "backlog: local PUBACKs, upstream down", "msgs/s", True),
]
CPU_METRICS = [("peer_cpu_us_per_msg", "peer CPU µs/msg"),
               ("upstream_cpu_us_per_msg", "upstream CPU µs/msg"),
               ("peer_rss_mb", "peer RSS MB")]


def _median(runs: list[Run], attr: str) -> float | None:
    values = [getattr(r, attr) for r in runs if r.error is None and getattr(r, attr) is not None]
    return statistics.median(values) if values else None


def _fmt(v: float | None, unit: str = "") -> str:
    if v is None:
        return "-"
    if unit == "s" or abs(v) < 100:
        return f"{v:,.2f}"
    return f"{v:,.0f}"


def summarize(runs: list[Run], peers: list[str]) -> tuple[dict[str, Any], str]:
    """Medians per (scenario, peer), ratios oxiedge / Mosquitto, and the text tables."""
    med: dict[str, dict[str, dict[str, float | None]]] = {}
    for scen in SCENARIOS:
        for peer in peers:
            sel = [r for r in runs if r.scenario == scen and r.peer == peer]
            if not sel:
                continue
            mrow = {attr: _median(sel, attr) for s2, attr, *_ in METRICS if s2 == scen}
            mrow.update({attr: _median(sel, attr) for attr, _l in CPU_METRICS})
            mrow["runs_ok"] = float(sum(r.error is None for r in sel))
            mrow["duplicates_total"] = float(sum(r.duplicates for r in sel))
            mrow["missing_total"] = float(sum(r.missing for r in sel))
            med.setdefault(scen, {})[peer] = mrow
    ratios: dict[str, dict[str, float | None]] = {}
    header = ["metric", "unit", *peers]
    both = "oxiedge" in peers and "mosquitto" in peers
    if both:
        header.append("oxiedge / mosquitto")
    rows = [header]
    for scen, attr, label, unit, higher in METRICS:
        if scen not in med:
            continue
        vals = [med[scen].get(p, {}).get(attr) for p in peers]
        row = [label, unit, *(_fmt(v, unit) for v in vals)]
        if both:
            o, m = med[scen]["oxiedge"].get(attr), med[scen]["mosquitto"].get(attr)
            ratio = o / m if o is not None and m else None
            ratios.setdefault(scen, {})[attr] = ratio
            row.append("-" if ratio is None else
                       f"{ratio:.2f}x" + ("" if higher else " (lower is better)"))
        rows.append(row)
    for scen in SCENARIOS:
        if scen not in med:
            continue
        for attr, label in CPU_METRICS:
            vals = [med[scen].get(p, {}).get(attr) for p in peers]
            row = [f"{scen}: {label}", "", *(_fmt(v) for v in vals)]
            if both:
                o, m = vals[peers.index("oxiedge")], vals[peers.index("mosquitto")]
                row.append(f"{o / m:.2f}x" if o is not None and m else "-")
            rows.append(row)
        dup = [f"{med[scen].get(p, {}).get('duplicates_total', 0):.0f} / "
               f"{med[scen].get(p, {}).get('missing_total', 0):.0f}" for p in peers]
        rows.append([f"{scen}: duplicates / missing (all runs)", "msgs", *dup,
                     *([""] if both else [])])
    return {"medians": med, "ratios": ratios}, table(rows)


def run_line(r: Run) -> str:
    head = f"  r{r.repeat} {r.scenario:<7} {r.peer:<9}"
    if r.error:
        return f"{head} ERROR {r.error} (unique {r.unique}, dup {r.duplicates})"
    extra = ""
    if r.scenario == "backlog":
        extra = (f", drained {r.time_to_drain:.2f} s after upstream start (first msg at "
                 f"+{r.reconnect_delay:.2f} s), loss noticed={r.noticed_loss}")
    cpu = (f", peer {r.peer_cpu_us_per_msg:.1f} µs/msg"
           if r.peer_cpu_us_per_msg is not None else "")
    return (f"{head} {r.rate:>9,.0f} msgs/s over {r.seconds:.2f} s, local "
            f"{r.local_rate or 0:,.0f}/s, dup {r.duplicates}, missing {r.missing}{extra}{cpu}, "
            f"gen {r.gen_cpu_pct or 0:.0f}%, load {r.load1 or 0:.1f}"
            + (" [py-spy]" if r.profiled else ""))


# -------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.uplink_bench",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=50_000, help="messages per run")
    p.add_argument("--repeats", type=int, default=5, help="repeats (median reported)")
    p.add_argument("--payload", type=int, default=100, help="payload bytes (>= 8)")
    p.add_argument("--scenario", action="append", choices=SCENARIOS,
                   help="only these scenarios (repeatable)")
    p.add_argument("--peer", action="append", choices=PEERS, help="only these peers")
    p.add_argument("--window", type=int, default=LINK_WINDOW,
                   help="unacknowledged messages on the link, both peers (oxiedge --window, "
                        "Mosquitto max_inflight_messages)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per measured phase")
    p.add_argument("--grace", type=float, default=0.3,
                   help="seconds to keep reading for late duplicates after each run")
    p.add_argument("--out", type=Path, default=RESULTS / "uplink-vm",
                   help="write OUT.json and OUT.txt (default bench/results/uplink-vm)")
    p.add_argument("--no-save", action="store_true", help="print only")
    p.add_argument("--py-spy", metavar="EXE",
                   help="profile oxiedge with py-spy during its measured phases")
    p.add_argument("--py-spy-gil", action="store_true",
                   help="py-spy --gil: sample only the thread holding the GIL")
    p.add_argument("--profile-dir", type=Path, default=RESULTS / "profiles",
                   help="where --py-spy writes uplink-SCENARIO-rN.stacks/.txt")
    a = p.parse_args(argv)
    if a.payload < 8:
        p.error("--payload must be at least 8 (the message index)")
    if not os.path.exists(brokers.mosquitto_exe()):
        print("mosquitto is not installed (apt-get install mosquitto)", file=sys.stderr)
        return 2
    scenarios = a.scenario or list(SCENARIOS)
    peers = a.peer or list(PEERS)
    info = machine.describe(tempfile.gettempdir())
    print("machine:", machine.one_line(info))
    mosq_version = subprocess.run([brokers.mosquitto_exe(), "-h"], capture_output=True, text=True
                                  ).stdout.splitlines()[:1]
    print("peers:", ", ".join(peers), "|", *mosq_version)
    print(DURABILITY_NOTE)
    packets = publishes(a.messages, a.payload)
    runs: list[Run] = []
    started = time.time()
    for rep in range(a.repeats):
        for scen in scenarios:
            # Rotate the peer order every repeat so drift hits both alike.
            order = peers[rep % len(peers):] + peers[:rep % len(peers)]
            for peer in order:
                r = run_one(scen, peer, rep, a, packets)
                runs.append(r)
                print(run_line(r), flush=True)
    data, text = summarize(runs, peers)
    head = (f"uplink bench: {a.messages} messages of {a.payload} B per run, {a.repeats} "
            f"repeat(s), medians; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}"
            f", {time.time() - started:.0f} s")
    settings = (
        f"Settings: local publisher QoS 1 with {PUB_WINDOW} in flight; oxiedge uplink window "
        f"{a.window} (default {LINK_WINDOW}), Mosquitto bridge max_inflight_messages "
        f"{a.window}, "
        "cleansession false, restart_timeout 1 1 (constant 1 s; a lone '1' kept 2.0.11's "
        "default 5 s jittered back-off), keepalive 30 s; oxiedge "
        "back-off is built in (0.5 s doubling to 30 s, jitter 0.5-1x), not configurable. "
        "Upstream: Mosquitto, in memory while measured (persistence only at exit, see "
        f"docstring), max_inflight_messages {UP_INFLIGHT}, one QoS 1 subscriber (persistent "
        "session). Backlog: the link was up, the upstream stopped, then N published, then "
        "the upstream started on the same port.")
    out_text = "\n".join([head, "machine: " + machine.one_line(info), settings,
                          DURABILITY_NOTE, "", text, "", "runs:",
                          *(run_line(r) for r in runs)]) + "\n"
    print()
    print(text)
    if not a.no_save:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        doc = {"command": " ".join(["python -m bench.uplink_bench", *(argv or sys.argv[1:])]),
               "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
               "machine": info, "mosquitto": mosq_version, "settings": settings,
               "durability_note": DURABILITY_NOTE,
               "options": {"messages": a.messages, "repeats": a.repeats, "payload": a.payload,
                           "window": a.window,
                           "scenarios": scenarios, "peers": peers},
               **data, "runs": [asdict(r) for r in runs]}
        a.out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
        a.out.with_suffix(".txt").write_text(out_text)
        print(f"\nwrote {a.out.with_suffix('.json')} and {a.out.with_suffix('.txt')}")
    return 1 if any(r.error or r.missing for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())

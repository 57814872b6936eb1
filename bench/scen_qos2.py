"""``mqtt-qos2``: QoS 2 publishes pipelined with ``window`` in flight, no subscriber.

Each message is the whole exchange: PUBLISH → PUBREC, PUBREL → PUBCOMP; a PUBCOMP lets the
next PUBLISH go. The PUBLISH packets are pre-encoded (``qos1_ring``'s layout with the QoS 2
flag) and the PUBRELs too, so the generator only parses the broker's 4-5 byte replies. An
MQTT 5 PUBREC may carry a reason code (0x10 "no matching subscribers": there is none
here), so replies are read by their length bytes in both versions. Messages/s counts
PUBCOMPs.
"""

from __future__ import annotations

import struct
import time

from bench.brokers import Target
from bench.mqttwire import RawMqtt, RingSender, qos1_ring
from bench.result import Meter, Options, Result
from bench.scen_mqtt import _connect, _need_mqtt, _payload, _uid

_PUBREC, _PUBCOMP = 5, 7
_RING = 65535


def qos2_ring(topic: str, payload: bytes, level: int) -> tuple[bytes, int]:
    """``qos1_ring`` with QoS 2 PUBLISH packets (ids 1..65535)."""
    ring, size = qos1_ring(topic, payload, level)
    out = bytearray(ring)
    out[0::size] = bytes((0x34,)) * _RING  # (first byte of each packet: PUBLISH, QoS 2)
    return bytes(out), size


def _pipelined_qos2(c: RawMqtt, topic: str, o: Options, meter: Meter) -> tuple[int, float, int]:
    """Publish up to ``o.count`` QoS 2 messages with ``o.window`` in flight; returns
    (PUBCOMPs received, elapsed seconds, PUBLISHes sent)."""
    ring, size = qos2_ring(topic, _payload(o), o.mqtt_level)
    pack = struct.Struct(">BBH").pack
    rels = [b""] + [pack(0x62, 2, pid) for pid in range(1, _RING + 1)]
    sock = c.sock
    ring_out = RingSender(sock, ring, size, _RING)
    n, window = o.count, min(o.window, _RING - 1)
    done = 0
    pending = bytearray()
    buf = bytearray(1 << 16)

    t0 = meter.start()
    deadline = t0 + o.duration
    ring_out.send(min(window, n))
    sock.settimeout(o.idle_timeout)
    while done < ring_out.sent:
        try:
            got = sock.recv_into(buf)
        except TimeoutError:
            break
        if not got:
            raise ConnectionError(f"broker closed the connection after {done} PUBCOMPs")
        pending += buf[:got]
        end, i, comps, out = len(pending), 0, 0, []
        while i + 2 <= end:
            nxt = i + 2 + pending[i + 1]
            if nxt > end:
                break
            kind = pending[i] >> 4
            if kind == _PUBREC:
                out.append(rels[(pending[i + 2] << 8) | pending[i + 3]])
            elif kind == _PUBCOMP:
                comps += 1
            i = nxt
        del pending[:i]
        if out:
            sock.sendall(b"".join(out))
        done += comps
        if comps and ring_out.sent < n and time.perf_counter() < deadline:
            ring_out.send(min(comps, n - ring_out.sent))
    t1 = meter.stop()
    ring_out.release()
    return done, t1 - t0, ring_out.sent


def qos2_pipelined(t: Target, o: Options) -> Result:
    """QoS 2 publishes with ``window`` in flight and no subscriber: messages/s."""
    addr = _need_mqtt(t, "mqtt-qos2")
    c = _connect(addr, "bpub-" + _uid(), level=o.mqtt_level)
    meter = Meter(t.pid)
    done, elapsed, sent = _pipelined_qos2(c, f"bench/{_uid()}/q2", o, meter)
    c.disconnect()
    r = Result("mqtt-qos2", t.name, unit="msgs/s", count=done, elapsed=elapsed,
               lost=sent - done)
    r.value = done / elapsed if elapsed else 0.0
    return meter.fill(r)

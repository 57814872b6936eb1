"""Memory and start-up: RSS idle, with N connected MQTT clients, with M queued durable
messages, and (oxiedge) the time to ``oxiedge ready`` with those messages pending.

``python -m bench.memory [--broker oxiedge] [--with-peers] [--clients 1000] [--queued 100000]``

Sequence per broker: start → settle → RSS idle → queue M persistent messages (AMQP: one
durable queue with confirms; MQTT: offline persistent sessions of 4,000 messages each,
QoS 1) → RSS → connect N MQTT clients (each subscribed to its own topic) → RSS →
disconnect.  For oxiedge then: SIGTERM and restart on the same data dir (time to
``oxiedge ready``, the recovered counts from its log, RSS after recovery), and the same
after SIGKILL (crash recovery replays the WAL).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from bench import brokers, procstat
from bench.brokers import Started, Target
from bench.machine import describe, one_line
from bench.mqttwire import RawMqtt
from bench.result import Meter, Options
from bench.run import broker_prefix
from bench.scen_mqtt import _pipelined_qos1

PER_SESSION = 4000  # below oxiedge's and our Mosquitto config's 4096 per-session bound


def rss_mb(t: Target) -> float:
    s = procstat.sample(t.pid)
    return s.rss / 1e6 if s else float("nan")


def settle(t: Target, seconds: float = 2.0) -> float:
    """RSS after a short pause (lets allocators and RabbitMQ's boot settle)."""
    time.sleep(seconds)
    return rss_mb(t)


def connect_clients(t: Target, n: int) -> list[RawMqtt]:
    assert t.mqtt is not None
    out = []
    for i in range(n):
        c = RawMqtt(*t.mqtt)
        c.connect(f"bmem-{i}")
        c.subscribe(f"bench/mem/{i}", 1)
        out.append(c)
    return out


def queue_amqp(t: Target, n: int) -> tuple[int, str]:
    from bench.scen_amqp import Queue, confirm_publish

    q = Queue(t, "mem")
    acked, _nacked, _a, _b = confirm_publish(t, q.name, n, Options(idle_timeout=10))
    depth = q.depth()
    q.conn.close()
    return depth if depth else acked, q.name


def queue_mqtt(t: Target, n: int) -> int:
    """Offline persistent sessions holding ``n`` QoS 1 messages in total."""
    assert t.mqtt is not None
    sessions = max(1, -(-n // PER_SESSION))
    acked_total = 0
    for s in range(sessions):
        topic = f"bench/memq/{s}"
        sub = RawMqtt(*t.mqtt)
        sub.connect(f"bmemq-{s}", clean=False)
        sub.subscribe(topic, 1)
        sub.disconnect()
        pub = RawMqtt(*t.mqtt)
        pub.connect(f"bmemq-pub-{s}")
        want = min(PER_SESSION, n - acked_total)
        o = Options(count=want, duration=120, window=500, idle_timeout=10)
        acked, _el, _sent = _pipelined_qos1(pub, topic, o, Meter(None))
        pub.disconnect()
        acked_total += acked
    return acked_total


def measure(st: Started, a: argparse.Namespace) -> dict[str, Any]:
    t = st.target
    out: dict[str, Any] = {"broker": t.name, "notes": t.notes}
    out["rss_idle_mb"] = settle(t)
    via = a.via if a.via != "auto" else ("amqp" if t.amqp else "mqtt")
    if (via == "amqp" and t.amqp is None) or (via == "mqtt" and t.mqtt is None):
        out["queued_skipped"] = f"{t.name} has no {via.upper()} listener"
    elif a.queued:
        t0 = time.perf_counter()
        out["queued"] = queue_amqp(t, a.queued)[0] if via == "amqp" else queue_mqtt(t, a.queued)
        out["queued_via"] = via
        out["queue_fill_s"] = time.perf_counter() - t0
        out["rss_queued_mb"] = settle(t)
    if t.mqtt is not None and a.clients:
        clients = connect_clients(t, a.clients)
        out["clients"] = len(clients)
        out["rss_clients_mb"] = settle(t)
        for c in clients:
            c.disconnect()
    if t.name.startswith("oxiedge"):
        out.update(restart_oxiedge(st, a))
    return out


def restart_oxiedge(st: Started, a: argparse.Namespace) -> dict[str, Any]:
    """SIGTERM / SIGKILL, then time a restart on the same data dir."""
    res: dict[str, Any] = {}
    data = st.tmp / "data"
    tmps = [st.tmp]
    for label, sig in (("sigterm", signal.SIGTERM), ("sigkill", signal.SIGKILL)):
        st.stop(remove=False, sig=sig)
        st = brokers.start_oxiedge(a.oxiedge_arg, data=data, cpu_prefix=a.prefix, timeout=120)
        tmps.append(st.tmp)
        res[f"ready_after_{label}_s"] = st.ready_s
        res[f"log_after_{label}"] = [x for x in st.log_lines if "recovered" in x]
        res[f"rss_after_{label}_mb"] = settle(st.target, 1.0)
    st.stop(remove=False)
    for d in tmps:
        shutil.rmtree(d, ignore_errors=True)
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--broker", action="append", default=[],
                   choices=["oxiedge", "mosquitto", "rabbitmq"],
                   help="broker to measure (repeatable; default: oxiedge)")
    p.add_argument("--with-peers", action="store_true")
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--queued", type=int, default=100_000)
    p.add_argument("--via", default="auto", choices=["auto", "amqp", "mqtt"],
                   help="how to queue the durable messages (auto: AMQP when available)")
    p.add_argument("--oxiedge-arg", action="append", default=[])
    p.add_argument("--cpus", default="", help="taskset -c CPUS for the brokers")
    p.add_argument("--wrap", default="", help="command prefix for the brokers (memory scope)")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    a.prefix = broker_prefix(a.wrap, a.cpus)
    # The connection and session bounds (docs/limits.md) would refuse this bench's own N
    # clients from one loopback address; it measures memory, not those bounds.
    room = str(a.clients + a.queued // 4000 + 64)
    a.oxiedge_arg = ["--max-connections", room, "--max-connections-per-source", room,
                     "--mqtt-max-sessions", room, *a.oxiedge_arg]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, a.clients * 2 + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    names = list(dict.fromkeys((a.broker or ["oxiedge"])
                               + (["mosquitto", "rabbitmq"] if a.with_peers else [])))
    if a.with_peers:
        brokers.ensure_peers_installed()
    info = describe(".")
    print("machine:", one_line(info), flush=True)
    results = []
    for name in names:
        if name == "oxiedge":
            st = brokers.start_oxiedge(a.oxiedge_arg, cpu_prefix=a.prefix)
        elif name == "mosquitto":
            st = brokers.start_mosquitto(a.prefix)
        else:
            st = brokers.start_rabbitmq(cpu_prefix=a.prefix)
        try:
            r = measure(st, a)
        finally:
            st.stop()
        print(json.dumps(r, default=str), flush=True)
        results.append(r)
    print()
    print("| broker | RSS idle MB | queued (via) | RSS queued MB | RSS + clients MB |"
          " ready after SIGTERM s | ready after SIGKILL s |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        def f(k: str, fmt: str = "{:.1f}", r: dict[str, Any] = r) -> str:
            v = r.get(k)
            return "-" if v is None else fmt.format(v)
        print(f"| {r['broker']} | {f('rss_idle_mb')} | {r.get('queued', '-')} "
              f"({r.get('queued_via', r.get('queued_skipped', '-'))}) | {f('rss_queued_mb')} | "
              f"{f('rss_clients_mb')} ({r.get('clients', 0)} clients) | "
              f"{f('ready_after_sigterm_s', '{:.2f}')} | {f('ready_after_sigkill_s', '{:.2f}')} |")
    if a.json:
        a.json.write_text(json.dumps({"machine": info, "results": results}, indent=1,
                                     default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

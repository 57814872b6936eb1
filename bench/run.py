"""``python -m bench``: run the scenarios against several brokers, interleaved, with medians.

Examples::

    python -m bench --with-peers --broker oxiedge --repeats 5
    python -m bench --broker oxiedge --count 2000 --duration 2 --repeats 1   # smoke
    python -m bench --target other=mqtt://127.0.0.1:1883,amqp://127.0.0.1:5672

Runs are interleaved (repeat → scenario → broker, the broker order rotating each repeat)
so slow drift of a shared machine hits every broker alike; the report shows medians.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from bench import (
    brokers,
    procstat,
    report,
    scen_amqp,
    scen_disk,
    scen_mqtt,
    scen_qos2,
    scen_stream,
    scen_tx,
)
from bench.brokers import Started, Target
from bench.machine import describe as describe_machine
from bench.machine import one_line
from bench.result import Options, Result, Skip, median_of

Scenario = Callable[[Target, Options], Result]

SCENARIOS: dict[str, tuple[Scenario, str]] = {
    "mqtt-qos0": (scen_mqtt.qos0, "MQTT QoS 0, 1 publisher → 1 subscriber"),
    "mqtt-qos1": (scen_mqtt.qos1_pipelined, "MQTT QoS 1 pipelined (window in flight), PUBACKs/s"),
    "mqtt-qos2": (scen_qos2.qos2_pipelined,
                  "MQTT QoS 2 pipelined (window in flight): PUBLISH→PUBREC, PUBREL→PUBCOMP"),
    "mqtt-fanout": (scen_mqtt.fanout, "MQTT QoS 0 fan-out 1 → N subscribers, deliveries/s"),
    "mqtt-qos1-seq": (scen_mqtt.qos1_sequential_raw,
                      "MQTT sequential QoS 1 publish→PUBACK (raw client)"),
    "mqtt-qos1-seq-paho": (scen_mqtt.qos1_sequential_paho,
                           "MQTT sequential QoS 1 publish→PUBACK (paho-mqtt)"),
    "mqtt-qos1-latency-paho": (scen_mqtt.qos1_delivery_paho,
                               "MQTT QoS 1 publish→delivery at 1k msgs/s, paho→paho"),
    "amqp-confirm-1": (scen_amqp.confirms, "AMQP persistent + confirms, 1 connection"),
    "amqp-confirm-8": (scen_amqp.confirms_8, "AMQP persistent + confirms, 8 connections, 1 queue"),
    "amqp-drain": (scen_amqp.drain, "AMQP drain, prefetch 100, manual ack"),
    "amqp-latency": (scen_amqp.latency, "AMQP publish→deliver at 1k msgs/s (pika)"),
    "amqp-confirm-seq": (scen_amqp.confirm_sequential,
                         "AMQP sequential persistent publish→confirm, durable queue (raw)"),
    "amqp-tx-1": (scen_tx.tx_each, "AMQP tx.commit after every persistent publish (raw)"),
    "amqp-tx-100": (scen_tx.tx_batch,
                    "AMQP tx.commit after every 100 persistent publishes (raw)"),
    "amqp-stream-publish": (scen_stream.stream_publish,
                            "AMQP persistent + confirms into a stream queue, 1 connection"),
    "amqp-stream-consume": (scen_stream.stream_consume,
                            "AMQP stream read from first, prefetch 100, manual ack"),
    "disk-sync": (scen_disk.disk_sync,
                  "the disk's sync floor: RocksDB write + flush_wal(True), no broker"),
    "mqtt-durable-offline": (scen_mqtt.durable_offline,
                             "MQTT QoS 1 to an offline persistent subscriber (durable)"),
    "bridge-mqtt-amqp": (scen_mqtt.bridge_mqtt_amqp,
                         "MQTT QoS 1 → amq.topic → durable queue (bridge)"),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--broker", action="append", default=[],
                   choices=["oxiedge", "mosquitto", "rabbitmq"],
                   help="start this broker on free loopback ports (repeatable)")
    p.add_argument("--with-peers", action="store_true",
                   help="apt-get install (if missing) and start Mosquitto and RabbitMQ")
    p.add_argument("--target", action="append", default=[],
                   help="NAME=mqtt://H:P,amqp://H:P[,pid=N]: a broker that already runs")
    p.add_argument("--scenario", "-s", action="append", default=[],
                   help="scenario name (repeatable; default all; see --list)")
    p.add_argument("--list", action="store_true", help="list scenarios and exit")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--count", type=int, default=Options.count)
    p.add_argument("--duration", type=float, default=Options.duration,
                   help="cap on one measured phase, seconds")
    p.add_argument("--payload", type=int, default=Options.payload)
    p.add_argument("--window", type=int, default=Options.window)
    p.add_argument("--amqp-window", type=int, default=Options.amqp_window)
    p.add_argument("--fanout", type=int, default=Options.fanout)
    p.add_argument("--connections", type=int, default=Options.connections)
    p.add_argument("--drain-count", type=int, default=Options.drain_count)
    p.add_argument("--latency-count", type=int, default=Options.latency_count)
    p.add_argument("--rate", type=float, default=Options.rate)
    p.add_argument("--mqtt-version", default="3.1.1",
                   help="comma list of 3.1.1,5: run every MQTT scenario in each version, "
                        "interleaved, one row per version (an MQTT 5 row is named "
                        "'SCENARIO v5')")
    p.add_argument("--rabbit-queue-type", default="quorum", choices=["quorum", "classic"])
    p.add_argument("--no-rabbit-mqtt", action="store_true",
                   help="do not enable RabbitMQ's MQTT plugin (durable MQTT peer)")
    p.add_argument("--oxiedge-arg", action="append", default=[],
                   help="extra argument for `oxiedge serve` (repeatable)")
    p.add_argument("--oxiedge-env", action="append", default=[],
                   help="KEY=VALUE for the oxiedge process (e.g. a small RocksDB profile)")
    p.add_argument("--cpus", default="",
                   help="pin every started broker with taskset -c CPUS (e.g. 0-3)")
    p.add_argument("--client-cpus", default="",
                   help="pin this process (the load generator and its client libraries' "
                        "threads) to CPUS, e.g. 1; with --cpus, sets where client and broker "
                        "run relative to each other (latency depends on it, bench/README.md)")
    p.add_argument("--placements", default="",
                   help="comma list of free,same,cross: run every scenario in each placement, "
                        "interleaved, one row per placement (same: every broker and this "
                        "process on CPU 0; cross: brokers on CPU 0, this process on CPU 1; "
                        "free: as --cpus / --client-cpus say, unpinned without them). "
                        "Re-pins the running brokers' threads; latency on "
                        "loopback depends on placement more than on the broker (README)")
    p.add_argument("--wrap", default="",
                   help="command prefix for started brokers, e.g. "
                        "'systemd-run --scope -p MemoryMax=512M --quiet'")
    p.add_argument("--no-pause-others", dest="pause_others", action="store_false",
                   help="leave the other started brokers running during a run "
                        "(default: SIGSTOP them so their background work does not count)")
    p.add_argument("--json", type=Path, help="write every run and the medians here")
    p.add_argument("--label", default="", help="free text stored with the results")
    return p.parse_args(argv)


def run(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.list:
        for name, (_fn, desc) in SCENARIOS.items():
            print(f"{name:22s} {desc}")
        return 0
    scen = a.scenario or list(SCENARIOS)
    unknown = [s for s in scen if s not in SCENARIOS]
    if unknown:
        print("unknown scenario(s): {} (see --list)".format(", ".join(unknown)), file=sys.stderr)
        return 2
    o = Options(count=a.count, duration=a.duration, payload=a.payload, window=a.window,
                amqp_window=a.amqp_window, fanout=a.fanout, connections=a.connections,
                drain_count=a.drain_count, latency_count=a.latency_count, rate=a.rate)
    every = os.sched_getaffinity(0)  # before --client-cpus narrows it: "unpinned"
    if a.client_cpus:
        os.sched_setaffinity(0, parse_cpus(a.client_cpus))
    want = list(dict.fromkeys(a.broker + (["mosquitto", "rabbitmq"] if a.with_peers else [])))
    prefix = broker_prefix(a.wrap, a.cpus)
    started: list[Started] = []
    targets: list[Target] = [brokers.external_target(s) for s in a.target]
    try:
        if a.with_peers or "mosquitto" in want or "rabbitmq" in want:
            brokers.ensure_peers_installed()
        for name in want:
            print(f"starting {name} ...", flush=True)
            if name == "oxiedge":
                env = dict(kv.split("=", 1) for kv in a.oxiedge_env)
                st = brokers.start_oxiedge(a.oxiedge_arg, cpu_prefix=prefix, env=env)
            elif name == "mosquitto":
                st = brokers.start_mosquitto(prefix)
            else:
                st = brokers.start_rabbitmq(a.rabbit_queue_type, not a.no_rabbit_mqtt, prefix)
            started.append(st)
            targets.append(st.target)
            t = st.target
            print("  {}: mqtt={} amqp={} pid={} {}".format(t.name, t.mqtt, t.amqp, t.pid,
                                                        "; ".join(t.notes)), flush=True)
        if not targets:
            print("no broker: give --broker, --with-peers or --target", file=sys.stderr)
            return 2
        return _run_all(a, o, scen, targets, every)
    finally:
        for st in started:
            st.stop()


#: ``--placements``: (broker CPUs, this process's CPUs); None is every CPU (unpinned)
PLACEMENTS: dict[str, tuple[set[int] | None, set[int] | None]] = {
    "free": (None, None),
    "same": ({0}, {0}),
    "cross": ({0}, {1}),
}


def parse_placements(spec: str) -> list[str]:
    names = [x.strip() for x in spec.split(",") if x.strip()]
    bad = [x for x in names if x not in PLACEMENTS]
    if bad:
        raise SystemExit(f"unknown placement(s) {', '.join(bad)}: use {', '.join(PLACEMENTS)}")
    if "cross" in names and len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("placement 'cross' needs two CPUs")
    return names


def placement_masks(name: str, cpus: str, client_cpus: str
                    ) -> tuple[set[int] | None, set[int] | None]:
    """(broker CPUs, this process's CPUs) of a placement: ``free`` is what ``--cpus`` /
    ``--client-cpus`` asked for (unpinned without them), the others are fixed."""
    if name == "free":
        return (parse_cpus(cpus) if cpus else None,
                parse_cpus(client_cpus) if client_cpus else None)
    return PLACEMENTS[name]


def place(pids: list[int], cpus: set[int] | None, client: set[int] | None,
          every: set[int]) -> None:
    """Pin every thread of the brokers' process trees, and this process, for one run.
    Threads the brokers start later inherit the mask of the thread that starts them."""
    for pid in pids:
        for p in procstat.tree(pid):
            try:
                tids = [int(t) for t in os.listdir(f"/proc/{p}/task")]
            except OSError:
                continue
            for tid in tids:
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(tid, cpus or every)
    for own in os.listdir("/proc/self/task"):  # every thread of this process (clients')
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(own), client or every)


def _run_all(a: argparse.Namespace, o: Options, scen: list[str],
             targets: list[Target], every: set[int]) -> int:
    runs: dict[tuple[str, str], list[Result]] = {}
    placements = parse_placements(a.placements) if a.placements else [""]
    levels = parse_mqtt_versions(a.mqtt_version)
    pids = [t.pid for t in targets if t.pid]
    rows: list[str] = []
    for rep in range(a.repeats):
        for s, level in ((n, lv) for n in scen for lv in (levels if is_mqtt(n) else [4])):
            fn = SCENARIOS[s][0]
            for pl in placements:
                row = s + (" v5" if level == 5 else "") + (f" @{pl}" if pl else "")
                if row not in rows:
                    rows.append(row)
                if pl:
                    place(pids, *placement_masks(pl, a.cpus, a.client_cpus), every)
                k = rep % len(targets)
                for t in targets[k:] + targets[:k]:  # rotate the order each repeat
                    others = [x.pid for x in targets if x is not t and x.pid and x.started]
                    with paused(others if a.pause_others else []):
                        r = run_one(fn, s, t, replace(o, mqtt_level=level))
                    r.scenario = row
                    runs.setdefault((row, t.name), []).append(r)
                    print(f"[{rep + 1}/{a.repeats}] {row:20s} {t.name:10s} {describe(r)}",
                          flush=True)
    if a.placements:
        place(pids, *placement_masks("free", a.cpus, a.client_cpus), every)
    scen = rows
    med = {k: median_of(v) for k, v in runs.items()}
    names = [t.name for t in targets]
    where = one_line(describe_machine("."))
    print(f"\nMedians of {a.repeats} interleaved run(s); machine: {where}")
    print(report.medians_table(scen, names, med))
    for (sname, tname), r in med.items():
        if r.skipped:
            print(f"  skipped {sname} on {tname}: {r.skipped}")
    subject = names[0]
    if len(names) > 1:
        print(f"\nRatios ({subject} ÷ peer, same run):")
        print(report.ratio_table(scen, subject, names[1:], med))
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({
            "label": a.label, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": describe_machine("."), "options": vars(o), "argv": sys.argv[1:],
            "targets": {t.name: {"notes": t.notes} for t in targets},
            "runs": [r.as_dict() for v in runs.values() for r in v],
            "medians": [r.as_dict() for r in med.values()],
        }, indent=1, default=str))
        print(f"results written to {a.json}")
    errors = [r for v in runs.values() for r in v if r.note.startswith("error")]
    return 1 if errors else 0


@contextlib.contextmanager
def paused(pids: list[int]) -> Iterator[None]:
    """SIGSTOP the other brokers' process trees for one run, SIGCONT after.

    On 2 cores, running the suite with the peers merely idle gave the broker under test
    less than half of what it did alone (oxiedge durable offline: 23k vs 45-78k
    PUBACKs/s), so every broker is measured with the others stopped.
    """
    trees = [procstat.tree(p) for p in pids]
    for tree in trees:
        for p in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGSTOP)
    try:
        yield
    finally:
        for tree in trees:
            for p in tree:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGCONT)


def parse_mqtt_versions(spec: str) -> list[int]:
    """``--mqtt-version``: ``3.1.1``, ``5`` or both, as protocol levels (4, 5)."""
    names = {"3.1.1": 4, "4": 4, "5": 5}
    out = [names.get(x.strip(), 0) for x in spec.split(",") if x.strip()]
    if not out or 0 in out:
        raise SystemExit(f"--mqtt-version {spec!r}: give 3.1.1, 5 or 3.1.1,5")
    return list(dict.fromkeys(out))


def is_mqtt(scenario: str) -> bool:
    """Whether a scenario speaks MQTT (and so runs in each ``--mqtt-version``)."""
    return scenario.startswith("mqtt-") or scenario == "bridge-mqtt-amqp"


def parse_cpus(spec: str) -> set[int]:
    """taskset's list syntax: ``0``, ``0,2``, ``0-3``."""
    out: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def broker_prefix(wrap: str, cpus: str) -> list[str] | None:
    """The command prefix every started broker runs under (memory scope, CPU pinning)."""
    out = shlex.split(wrap) + (["taskset", "-c", cpus] if cpus else [])
    return out or None


def run_one(fn: Scenario, scenario: str, t: Target, o: Options) -> Result:
    try:
        return fn(t, o)
    except Skip as e:
        return Result(scenario, t.name, skipped=str(e))
    except Exception as e:
        tb = traceback.format_exc(limit=3)
        r = Result(scenario, t.name, skipped=f"error: {type(e).__name__}: {e}")
        r.note = "error " + tb
        return r


def describe(r: Result) -> str:
    if r.skipped is not None:
        return f"SKIP ({r.skipped})"
    cpu = r.cpu_us_per_msg
    lat = (f" p50 {r.p50_ms:.3f} ms p99 {r.p99_ms:.3f} ms") if r.p50_ms is not None else ""
    head = f"{r.value:10.0f} {r.unit}" if r.higher_better else f"{r.count:10d} msgs"
    cpu_s = "-" if cpu is None else f"{cpu:.1f}µs/msg ({r.cpu_pct or 0:.0f}%)"
    rss = "-" if r.rss_mb is None else f"{r.rss_mb:.1f}MB"
    gen = f" gen={r.extra['gen_cpu_pct']}%" if "gen_cpu_pct" in r.extra else ""
    return (f"{head}  n={r.count} lost={r.lost} {r.elapsed:.2f}s{lat} broker-cpu={cpu_s} "
            f"rss={rss}{gen}")


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()

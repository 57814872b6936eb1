"""MQTT publish throughput with topic ACLs on vs off, oxiedge and Mosquitto (issue 16).

    python -m bench.acl_bench [--count 200000] [--duration 10] [--repeats 3]
                              [--json bench/results/acl.json]

Four brokers run at once on free loopback ports: oxiedge without rules and oxiedge with the
rule set :data:`RULES` (20 lines, written with the real ``oxiedge acl add`` CLI into its
data dir before it starts), Mosquitto 2 without an ``acl_file`` and Mosquitto with the same
20 lines as its ``acl_file``. The clients are anonymous on both (so the lines for anonymous
clients apply - in Mosquitto's acl_file those before the first ``user`` line - and no
password hashing enters the figures), and every one of them publishes and subscribes under
``bench/#``, which the rules grant, past a ``deny`` line that must be checked and does not
match. Scenarios (the raw pre-encoded generator of ``tls_bench.py``, over plain TCP):

* ``qos0``: one publisher streams QoS 0 to one subscriber; deliveries/s (the write check on
  every PUBLISH, the read check on every delivery);
* ``qos1``: QoS 1 with 500 in flight, no subscriber; PUBACKs/s (the write check).

Runs are interleaved (repeat -> scenario -> broker, order rotated) and medians reported,
with each broker's CPU per message from /proc. Machine, load average before and after, and
the code revision are printed and stored with the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import brokers
from bench.machine import describe, one_line
from bench.tls_bench import Endpoint, qos0, qos1

#: (access, topic): anonymous lines, then pattern lines (``%c`` client id, ``%u`` user).
#: Shaped like a small fleet's: per-site grants that the bench's topics do not match, one
#: deny that must be checked, the grant the bench uses, and per-client patterns.
RULES: tuple[tuple[str, str, str], ...] = (
    *(("anonymous", "readwrite", f"fleet/site{i}/#") for i in range(12)),
    ("anonymous", "read", "status/+/online"),
    ("anonymous", "write", "ingest/+/raw"),
    ("anonymous", "deny", "bench/secret/#"),
    ("anonymous", "readwrite", "bench/#"),
    ("pattern", "readwrite", "devices/%c/#"),
    ("pattern", "read", "cmd/%c/#"),
    ("pattern", "write", "telemetry/%c/+"),
    ("pattern", "read", "users/%u/#"),
)
BROKERS = ("oxiedge", "oxiedge+acl", "mosquitto", "mosquitto+acl")


def oxiedge_rules(data: Path) -> None:
    """Write :data:`RULES` with the CLI on the offline data dir (what an operator runs)."""
    for kind, access, topic in RULES:
        subprocess.run([*brokers.oxiedge_command(), "acl", "add", access, topic, f"--{kind}",
                        "--data", str(data)], check=True, capture_output=True, timeout=60)


def mosquitto_acl_file(path: Path) -> None:
    """The same lines in Mosquitto's acl_file syntax (anonymous lines come first)."""
    lines = [f"{'topic' if kind == 'anonymous' else 'pattern'} {access} {topic}"
             for kind, access, topic in RULES]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o644)


def start_mosquitto(tmp: Path, acl: Path | None) -> tuple[subprocess.Popen[bytes], int]:
    port = brokers.free_port()
    conf = tmp / f"mosquitto-{port}.conf"
    conf.write_text(
        "per_listener_settings false\nallow_anonymous true\npersistence false\n"
        "set_tcp_nodelay true\nmax_queued_messages 4096\n"
        f"log_dest file {tmp}/mosquitto-{port}.log\nlistener {port} 127.0.0.1\n"
        + (f"acl_file {acl}\n" if acl is not None else ""))
    proc = brokers.popen_broker([brokers.mosquitto_exe(), "-c", str(conf)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    brokers.wait_port("127.0.0.1", port, 10)
    return proc, port


def _check_rules_on(data: Path) -> None:
    """The running oxiedge says its rules are on (``oxiedge status``), or the bench stops."""
    out = subprocess.run([*brokers.oxiedge_command(), "status", "--json", "--data", str(data)],
                         check=True, capture_output=True, text=True, timeout=60).stdout
    perms = json.loads(out)["permissions"]
    if not str(perms["rules"]).startswith("on"):
        raise SystemExit(f"oxiedge+acl runs without rules: {perms}")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.acl_bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--payload", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    brokers.ensure_peers_installed()
    tmp = Path(tempfile.mkdtemp(prefix="bench-acl-"))
    tmp.chmod(0o755)  # Mosquitto started as root reads its acl_file as the mosquitto user
    acl_data = tmp / "oxiedge-acl-data"
    oxiedge_rules(acl_data)
    acl_file = tmp / "acl"
    mosquitto_acl_file(acl_file)
    machine = describe(tmp)
    print(one_line(machine), flush=True)
    load_before = _load()
    started: list[Any] = []
    procs: list[subprocess.Popen[bytes]] = []
    try:
        plain = brokers.start_oxiedge(["--amqp-port", "off"])
        started.append(plain)
        ruled = brokers.start_oxiedge(["--amqp-port", "off"], data=acl_data)
        started.append(ruled)
        _check_rules_on(acl_data)
        m_plain, m_plain_port = start_mosquitto(tmp, None)
        m_acl, m_acl_port = start_mosquitto(tmp, acl_file)
        procs += [m_plain, m_acl]
        eps = []
        for name, st in (("oxiedge", plain), ("oxiedge+acl", ruled)):
            assert st.target.mqtt is not None
            eps.append(Endpoint(name, *st.target.mqtt, st.target.pid, None))
        eps += [Endpoint("mosquitto", "127.0.0.1", m_plain_port, m_plain.pid, None),
                Endpoint("mosquitto+acl", "127.0.0.1", m_acl_port, m_acl.pid, None)]
        payload = os.urandom(args.payload)
        scen: dict[str, Callable[[Endpoint], dict[str, Any]]] = {
            "qos0": lambda ep: qos0(ep, args.count, args.duration, payload),
            "qos1": lambda ep: qos1(ep, args.count, args.duration, payload),
        }
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for rep in range(args.repeats):
            for name, fn in scen.items():
                shift = rep % len(eps)
                for ep in eps[shift:] + eps[:shift]:
                    r = fn(ep)
                    runs.setdefault((name, ep.name), []).append(r)
                    print(f"  repeat {rep + 1} {name:5s} {ep.name:14s} {r['rate']:10.0f}/s "
                          f"cpu/op {r['broker_cpu_us_per_op'] or 0:6.1f} us "
                          f"gen {r['gen_cpu_pct']}% lost {r['lost']}", flush=True)
    finally:
        for st in started:
            st.stop()
        for proc in procs:
            brokers.terminate(proc)
    load_after = _load()
    print(f"load average before {load_before}, after {load_after}")
    summary = _summary(runs)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "args": vars(args) | {"json": str(args.json)}, "machine": machine,
            "load_before": load_before, "load_after": load_after, "rules": RULES,
            "summary": summary, "runs": {f"{k[0]}/{k[1]}": v for k, v in runs.items()}},
            indent=1, default=str))
    return 0


def _summary(runs: dict[tuple[str, str], list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    print("\nmedians (rules on / off per broker):")
    for name in dict.fromkeys(k[0] for k in runs):
        med = {b: statistics.median(r["rate"] for r in runs[(name, b)])
               for b in BROKERS if (name, b) in runs}
        cpu = {b: statistics.median(r["broker_cpu_us_per_op"] or 0 for r in runs[(name, b)])
               for b in med}
        ratios = {b: med[f"{b}+acl"] / med[b] for b in ("oxiedge", "mosquitto")
                  if med.get(b) and f"{b}+acl" in med}
        out[name] = {"rate": med, "broker_cpu_us_per_op": cpu, "acl_over_plain": ratios}
        cells = "  ".join(f"{b} {med[b]:9.0f}/s ({cpu[b]:.1f} us)" for b in med)
        print(f"  {name:5s} {cells}  on/off: " + ", ".join(f"{b} {r:.2f}"
                                                            for b, r in ratios.items()))
    return out


if __name__ == "__main__":
    raise SystemExit(main())

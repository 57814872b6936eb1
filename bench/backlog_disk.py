"""What a backlog costs the card: bytes written per acknowledged message, fill then drain.

``python -m bench.backlog_disk [--messages 200000] [--payload 100]
[--broker oxiedge --broker mosquitto-10s ...] [--hold S] [--oxiedge-arg ARG ...] [--json FILE]``

One persistent QoS 1 subscriber subscribes and goes away; a raw publisher fills N QoS 1
messages into its session (500 in flight); the subscriber comes back and drains them,
acknowledging each (``backlog.fill`` / ``backlog.drain``), ``--hold`` seconds after the fill
(a backlog waits: an outage). What the broker's process tree
caused to be written to storage (``/proc/PID/io`` ``write_bytes``, summed over the tree,
counted when a page is dirtied) is read before the fill, after it, and after the drain; the
figure is per message acknowledged to the publisher. A graceful stop's final save is not
counted (Mosquitto writes its whole database then once more).

Brokers (each on free loopback ports, a fresh data dir):

``oxiedge``         this checkout: every PUBACK after the WAL sync of its round
``mosquitto-10s``   Mosquitto with ``persistence true``, ``autosave_interval 10``: the whole
                    in-memory database rewritten to one file every 10 s (PUBACK from memory;
                    what arrived since the last save is lost in a crash)
``mosquitto-1000``  ``autosave_on_changes true``, ``autosave_interval 1000``: the whole file
                    rewritten after every 1000 changes (a message queued, a message sent)
``rabbitmq``        RabbitMQ with its MQTT plugin (the session's queue is a durable classic
                    queue; PUBACK after the queue confirmed the persistent message)
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import brokers, procstat
from bench.backlog import drain, fill
from bench.brokers import Started, Target
from bench.machine import describe, one_line

BROKERS = ("oxiedge", "mosquitto-10s", "mosquitto-1000", "rabbitmq")


def tree_written(pid: int | None) -> int:
    """``write_bytes`` of ``pid`` and its descendants."""
    if pid is None:
        return 0
    total = 0
    for p in procstat.tree(pid):
        try:
            with open(f"/proc/{p}/io") as f:
                for line in f:
                    if line.startswith("write_bytes:"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total


def start_mosquitto_persistent(autosave: str) -> Started:
    """Mosquitto with persistence on: ``autosave`` ``"10s"`` (every 10 s) or ``"1000"``
    (after every 1000 changes); no bound on queued messages."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-mosqp-"))
    port = brokers.free_port()
    save = ("autosave_interval 10\n" if autosave == "10s"
            else "autosave_on_changes true\nautosave_interval 1000\n")
    conf = tmp / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\nuser root\npersistence true\n"
        f"persistence_location {tmp}/\n{save}max_queued_messages 0\nmax_queued_bytes 0\n"
        f"log_dest file {tmp}/mosquitto.log\n")
    proc = brokers.popen_broker([brokers.mosquitto_exe(), "-c", str(conf)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    brokers.wait_port("127.0.0.1", port, 10)
    t = Target(f"mosquitto-{autosave}", mqtt=("127.0.0.1", port), pid=proc.pid,
               log_path=tmp / "mosquitto.log")
    return Started(t, proc, tmp)


def start(name: str, n: int, oxiedge_args: list[str]) -> Started:
    if name == "oxiedge":
        args = ["--mqtt-queue-limit", str(n + 1000), "--mqtt-queue-bytes", "64GiB",
                "--amqp-port", "off", *oxiedge_args]
        return brokers.start_oxiedge(args, timeout=300)
    if name.startswith("mosquitto-"):
        return start_mosquitto_persistent(name.removeprefix("mosquitto-"))
    if name == "rabbitmq":
        return brokers.start_rabbitmq(queue_type="classic", with_mqtt=True)
    raise SystemExit(f"unknown broker {name!r} (one of {', '.join(BROKERS)})")


def run(name: str, n: int, payload: int, oxiedge_args: list[str], hold: float = 0.0
        ) -> dict[str, Any]:
    st = start(name, n, oxiedge_args)
    t = st.target
    out: dict[str, Any] = {"broker": name, "messages": n, "payload": payload, "hold_s": hold}
    try:
        time.sleep(2.0)  # start-up writes settle
        w0 = tree_written(t.pid)
        acked, secs = fill(t, n, payload)
        time.sleep(hold)
        w1 = tree_written(t.pid)
        got, dsecs = drain(t, acked)
        time.sleep(12.0)  # a Mosquitto autosave period and a commit round after the drain
        w2 = tree_written(t.pid)
        out.update(filled=acked, fill_s=secs, drained=got, drain_s=dsecs,
                   fill_written=w1 - w0, drain_written=w2 - w1,
                   per_msg=(w2 - w0) / max(1, acked))
    finally:
        st.stop()
        shutil.rmtree(st.tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.backlog_disk", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--payload", type=int, default=100)
    p.add_argument("--broker", action="append", choices=BROKERS)
    p.add_argument("--hold", type=float, default=0.0, help="seconds between fill and drain")
    p.add_argument("--oxiedge-arg", action="append", default=[])
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    info = describe(".")
    print("machine:", one_line(info), flush=True)
    results = []
    for name in a.broker or BROKERS:
        r = run(name, a.messages, a.payload, a.oxiedge_arg, a.hold)
        print(json.dumps(r), flush=True)
        results.append(r)
    print()
    print("| broker | N x payload | held s | acked / drained | written: fill (+ held) / drain MB | "
          "B written per acknowledged msg |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['broker']} | {r['messages']:,} x {r['payload']} B | {r['hold_s']:.0f} | "
              f"{r['filled']:,} / {r['drained']:,} | {r['fill_written'] / 1e6:.1f} / "
              f"{r['drain_written'] / 1e6:.1f} | {r['per_msg']:.0f} |")
    if a.json:
        a.json.write_text(json.dumps({"machine": info, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

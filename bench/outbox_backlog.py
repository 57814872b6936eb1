"""A deep backlog in one uplink's outbox: memory, restart and forwarding once it drains.

``python -m bench.outbox_backlog [--messages 200000] [--payload 100] [--tree LABEL=DIR ...]
[--rounds R] [--json FILE]``

Sequence: ``oxiedge uplink add up mqtt://127.0.0.1:PORT --out 'bench/#'`` (offline, on a
new data dir; nothing listens on PORT: the upstream is down) → ``oxiedge serve`` → RSS
idle → a raw publisher fills N QoS 1 messages into ``bench/backlog``, 500 in flight (every
PUBACK covers the outbox copy) → RSS full → SIGKILL → restart on the same data dir (time to
``oxiedge ready``, RSS after the restart) → a Mosquitto starts on PORT (in memory) → the
uplink reconnects and forwards the backlog; the forward rate is N over the time from its
first confirm to an empty outbox (``oxiedge uplink status``, polled: the reconnect back-off
is left out), with the broker's CPU per forwarded message → RSS after the drain. RSS per
queued message is ``(full - idle) / N``.

``--tree LABEL=DIR`` (repeatable) runs the same sequence against another checkout with its
own ``.venv``, the trees taking turns ``--rounds`` times: a before/after in one invocation.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import brokers, procstat
from bench.backlog import in_turns, rss_mb
from bench.brokers import Started, Target
from bench.mqttwire import RawMqtt
from bench.result import Meter, Options
from bench.scen_mqtt import _pipelined_qos1


def _cli(tree: Path | None) -> list[str]:
    return brokers.oxiedge_command() if tree is None else [
        str(tree / ".venv" / "bin" / "python"), "-m", "oxiedge"]


def status(tree: Path | None, data: Path) -> dict[str, Any]:
    out = subprocess.run([*_cli(tree), "uplink", "status", "--json", "--data", str(data)],
                         capture_output=True, text=True, timeout=60)
    return dict(json.loads(out.stdout)["up"])


def fill(t: Target, n: int, payload: int) -> tuple[int, float]:
    """``n`` QoS 1 messages for the uplink: (acknowledged, seconds)."""
    assert t.mqtt is not None
    pub = RawMqtt(*t.mqtt)
    pub.connect("outbox-pub")
    o = Options(count=n, duration=3600, window=500, idle_timeout=30, payload=payload)
    acked, elapsed, _sent = _pipelined_qos1(pub, "bench/backlog", o, Meter(None))
    pub.disconnect()
    return acked, elapsed


def upstream(port: int, n: int) -> tuple[subprocess.Popen[bytes], Path]:
    """An in-memory Mosquitto on ``port`` (it acknowledges QoS 1 with or without subscribers)."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-up-"))
    conf = tmp / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
                    f"max_queued_messages {n + 1000}\nlog_dest file {tmp}/mosquitto.log\n")
    proc = subprocess.Popen(["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    return proc, tmp


def forward(tree: Path | None, data: Path, pid: int | None, n: int,
            timeout: float = 900) -> dict[str, Any]:
    """Poll the uplink until its outbox is empty: the forward rate and CPU per message."""
    out: dict[str, Any] = {}
    deadline = time.monotonic() + timeout
    t_first = c_first = None
    while time.monotonic() < deadline:
        st = status(tree, data)
        now = time.monotonic()
        if t_first is None and st["confirmed"] > 0:
            t_first, c_first = now, st["confirmed"]
            s = procstat.sample(pid)
            out["cpu0"] = s.cpu if s else 0.0
        if st["backlog_messages"] == 0 and st["inflight"] == 0:
            s = procstat.sample(pid)
            if t_first is not None and c_first is not None:
                moved = n - c_first
                out["forward_s"] = now - t_first
                out["forward_msg_s"] = moved / out["forward_s"] if out["forward_s"] else 0.0
                if s:
                    out["forward_cpu_us"] = (s.cpu - out.pop("cpu0")) * 1e6 / max(1, moved)
            out["resent"] = st["resent"]
            return out
        time.sleep(0.2)
    out["error"] = "outbox not empty in time"
    return out


def run(a: argparse.Namespace, tree: Path | None) -> dict[str, Any]:
    n = a.messages
    tmp = Path(tempfile.mkdtemp(prefix="bench-outbox-"))
    data = tmp / "data"
    port = brokers.free_port()
    subprocess.run([*_cli(tree), "uplink", "add", "up", f"mqtt://127.0.0.1:{port}", "--out",
                    "bench/#", "--data", str(data)], check=True, capture_output=True)
    args = ["--amqp-port", "off", "--device-id", "bench"]
    st: Started = brokers.start_oxiedge(args, data=data, timeout=300, tree=tree)
    tmps, up = [tmp, st.tmp], None
    out: dict[str, Any] = {"messages": n, "payload": a.payload}
    try:
        out["rss_idle_mb"] = rss_mb(st.target)
        acked, secs = fill(st.target, n, a.payload)
        out.update(filled=acked, fill_s=secs, fill_msg_s=acked / secs if secs else 0.0)
        out["rss_full_mb"] = rss_mb(st.target)
        out["rss_per_msg_b"] = (out["rss_full_mb"] - out["rss_idle_mb"]) * 1e6 / max(1, acked)
        out["backlog"] = status(tree, data)["backlog_messages"]
        st.stop(remove=False, sig=signal.SIGKILL)
        st = brokers.start_oxiedge(args, data=data, timeout=300, tree=tree)
        tmps.append(st.tmp)
        out["ready_after_sigkill_s"] = st.ready_s
        out["rss_after_restart_mb"] = rss_mb(st.target)
        up, up_tmp = upstream(port, n)
        tmps.append(up_tmp)
        out.update(forward(tree, data, st.target.pid, acked))
        out["rss_drained_mb"] = rss_mb(st.target)
    finally:
        st.stop(remove=False)
        if up is not None:
            up.terminate()
            up.wait(10)
        for d in tmps:
            shutil.rmtree(d, ignore_errors=True)
    return out


ROW = ("| tree | N | RSS idle / full / after SIGKILL+restart / drained MB | B per msg | "
       "ready after SIGKILL s | fill msg/s | forward msg/s | broker CPU µs per forwarded msg |")


def row(label: str, r: dict[str, Any]) -> str:
    return (f"| {label} | {r['messages']:,} | {r['rss_idle_mb']:.1f} / {r['rss_full_mb']:.1f} / "
            f"{r['rss_after_restart_mb']:.1f} / {r['rss_drained_mb']:.1f} | "
            f"{r['rss_per_msg_b']:.1f} | {r['ready_after_sigkill_s']:.2f} | "
            f"{r['fill_msg_s']:,.0f} | {r.get('forward_msg_s', float('nan')):,.0f} | "
            f"{r.get('forward_cpu_us', float('nan')):.1f} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.outbox_backlog", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--payload", type=int, default=100)
    p.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR",
                   help="also run against this checkout (its own .venv); repeatable")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)

    def one(_label: str, _k: int, tree: Path | None) -> dict[str, Any]:
        with open("/proc/loadavg") as f:
            load = float(f.read().split()[0])
        return {**run(a, tree), "load1": load}

    return in_turns(a, one, ROW, row)

if __name__ == "__main__":
    sys.exit(main())
